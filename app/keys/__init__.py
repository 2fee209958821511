"""API keys: who a request is for, what it may ask, and how much.

``file`` reads the keys file, ``ring`` finds a key by the hash of what a
client presents, ``watch`` reloads the file when it changes, ``identify``
turns a request's headers into an ``Identity``, ``quota`` holds a key to its
limits. ``python -m app.keys new`` makes a key.
"""
