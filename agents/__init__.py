"""Crawler and classifier agents: Hub crawl or offline catalog, triage, traits, representatives."""
