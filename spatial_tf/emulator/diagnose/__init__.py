"""Diagnosis: what a partitioned step costs per core (``report``), whether partitioning
changes its results (``compare``), and the user's line and fix for each gather.
"""
