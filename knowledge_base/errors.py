"""The knowledge base's error, importable without Chroma so the CLI can catch it cheaply."""

from kgen.errors import KgenError


class KnowledgeBaseError(KgenError):
    """The store cannot be used as asked: unreachable, corrupt, locked, mismatched embedding."""
