"""Read-model stores: for each read model, the one module that holds its rows' shape, its
writes and the queries others need (the projection that owns it writes; recall reads).

Services never import each other: what a second service needs of a read model is here.
"""
