"""Training and decoding: the loop, the small-LM recipe the claims share, models built for decoding."""
