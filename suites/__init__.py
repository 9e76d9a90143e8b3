"""The shipped suites, installed as the package pytest_modelbench.suites so that `python -m pytest_modelbench init`
finds them in a wheel and in an editable install alike (pyproject.toml). Their files are read, never imported."""
