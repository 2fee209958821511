"""Counting prompt tokens as the engine counts them (``counter``), from the
engine's ``/tokenize`` (``engine``) or the model's tokenizer files
(``local``, ``template``)."""
