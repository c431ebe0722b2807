"""How a place in the input is said to a person: "report.pdf pp. 3-5". Kept apart from chunking
(which needs numpy) so that printing a stored trace does not load it."""

from __future__ import annotations


def describe_place(path: str, first_page: int | None, last_page: int | None) -> str:
    """'report.pdf pp. 3-5', 'report.pdf p. 3', or the path alone for a text source."""
    if first_page is None:
        return path
    pages = f"p. {first_page}" if first_page == last_page else f"pp. {first_page}-{last_page}"
    return f"{path} {pages}"
