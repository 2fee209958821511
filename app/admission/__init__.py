"""Admission control: whether a request may go to the engine now, later, or not at all."""
