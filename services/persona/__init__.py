"""The persona (LPM) worker: turns promoted segments into profile, knowledge and traits."""
