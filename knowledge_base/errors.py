"""The knowledge base's error, importable without Chroma so the CLI can catch it cheaply."""


class KnowledgeBaseError(Exception):
    """The store cannot be used as asked: unreachable, corrupt, locked, mismatched embedding."""
