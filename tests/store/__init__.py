"""Tests of service/store: one contract suite for both stores, and failure tests."""
