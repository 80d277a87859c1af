"""The text: the Shakespeare corpus (characters) and its byte-level BPE view."""
