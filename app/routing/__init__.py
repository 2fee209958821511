"""Routing: which engine a request goes to, among those where it fits now.

A route is filters, a cache view, weighted scorers and a pick
(``base``, ``router``): the filters drop engines a request may not go to
(``filters``), the scorers rank the rest (``scorers``: the KV budget, the
requests in flight, what the engines hold of the prompt), a load cap bounds
affinity (``load_cap``). Pure, tested like the admission policy; admission
asks its ``router.Router``, built from the settings by ``setup``.
"""
