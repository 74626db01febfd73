"""Local stand-ins for what cannot exist offline (the Hub, an LLM endpoint), speaking the real protocols."""
