"""The decide stage: the verified candidate that pays, or the default path (stage)."""
