"""`python -m bakeoff.cli`, as the tests and the docs run it: the `bakeoff` command."""

from bakeoff.cli import main

if __name__ == "__main__":
    main()
