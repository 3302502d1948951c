# Makes `pytest` from the repository root run the doctests with the repository as working folder.
