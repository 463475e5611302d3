"""What sits in a seat: LLM policies and scripted baselines, behind one protocol."""
