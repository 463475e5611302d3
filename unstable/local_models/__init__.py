"""Model names and the tiny local models, low in the layers so that every class taking a model name
(learners, inference backends, the collector, evaluation, the CLI) resolves ``"tiny"``, ``"tiny:10m"`` and
``"tiny:1m:seed1"`` itself. :mod:`unstable.models` re-exports the tiny models' public names."""
