"""State that several gateway replicas must share, behind one interface.

``local`` keeps it in this process (one replica, the default); ``redis``
keeps it in Redis for a fleet of replicas. Keys and admission use the
interfaces in ``base`` and never know which one they run on.
"""
