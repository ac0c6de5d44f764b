"""Package discovery for the memoryd distribution (everything else is in pyproject.toml).

The design card fixes the top-level folders shared/ and services/; they install as
memoryd.shared and memoryd.services (package-dir in pyproject.toml). setuptools' own discovery
(`[tool.setuptools.packages.find]`) names packages after their folders and cannot add the
`memoryd.` prefix, so the prefix is added here: every subpackage is found, none is listed.
"""

from setuptools import find_packages, setup

setup(
    packages=[
        f"memoryd.{package}"
        for package in find_packages(include=["shared", "shared.*", "services", "services.*"])
    ]
)
