"""A run: its config, ``build()``, the wiring of the components into Ray actors, resuming, and the
Ray helpers. This is the one package that imports Ray."""
