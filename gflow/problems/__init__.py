"""What is learned: the attention models, Markov chains and their losses."""
