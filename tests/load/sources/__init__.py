"""Specs for `load.sources`: where bytes come from (archives, URLs, servers)."""
