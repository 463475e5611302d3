"""The ``unstable`` command line (``unstable.cli.commands.main``) and the default job (``quickstart``)."""
