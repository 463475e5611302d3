"""Collection: the turn loop that plays one game, the scheduler that decides the next game, and the
collector that keeps many games in flight and routes what they produce."""
