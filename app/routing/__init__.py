"""Routing: which engine a request goes to, among those where it fits now.

A route is filters, then a picker (``base``): the filters drop engines a
request may not go to (``filters``), the picker ranks the rest —
``least_loaded``, or ``prefix`` (affinity with bounded load). Pure, tested
like the admission policy; admission asks its ``router.Router``.
"""
