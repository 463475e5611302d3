"""The game layer: env ids, specs, prompt templates, action extraction and the turn loop."""
