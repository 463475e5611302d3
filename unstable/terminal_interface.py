"""``python -m unstable.terminal_interface``, as the seed documents it; the code is in ``unstable.ui``."""

if __name__ == "__main__":
    import sys

    from unstable.ui.terminal_interface import main

    sys.exit(main())
