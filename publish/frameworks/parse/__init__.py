"""Parsers of files only the frameworks read: trainer_state.json, a DCP .metadata and DeepSpeed's
data.pkl (over the inert unpickler torch_pickle), a zip's tail, and the forked child that runs a big
parse under a deadline."""
