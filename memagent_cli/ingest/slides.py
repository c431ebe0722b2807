"""PowerPoint (.pptx) and OpenDocument presentations (.odp) as text with provenance: one part
per slide, titled by the slide's title; text, tables, charts (title and series values), alt text
and speaker notes. Images are never read, only their descriptions.

The package checks and the OpenDocument walk are shared with the other families in office.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, BinaryIO

from .base import Part, Place, ReadContext, short_reason, unreadable
from .office import (
    DAMAGED_HINT,
    DRAW,
    ELEMENT,
    PRESENTATION,
    Odf,
    cell_text,
    check_package,
    load_odf,
    odf_elements,
    one_line,
    unit_label,
    what_of,
)

# --------------------------------------------------------------------------------------------
# PowerPoint (.pptx)


def read_pptx(file: BinaryIO, context: ReadContext) -> Iterator[Part]:
    """A presentation's slides, one part each, hidden slides included (marked "[Hidden slide]")."""
    check_package(file, context, "pptx")
    import pptx

    try:
        presentation = pptx.Presentation(file)
        slides = list(presentation.slides)
    except Exception as exc:  # python-pptx raises KeyError, XMLSyntaxError, PackageNotFoundError…
        raise unreadable(context.title, what_of("pptx"), short_reason(exc), DAMAGED_HINT) from exc
    for number, slide in enumerate(slides, 1):
        try:
            title, text = _slide_text(slide, context, number)
        except Exception as exc:  # one damaged slide loses that slide
            context.warn(f"{context.title}: slide {number} could not be read ({short_reason(exc)})")
            continue
        yield Part(text, Place("slide", number, unit_label(title) if title else None))


def _slide_text(slide: Any, context: ReadContext, number: int) -> tuple[str, str]:
    lines: list[str] = []
    if slide.element.get("show") in ("0", "false"):
        lines.append("[Hidden slide]")
    title_shape = slide.shapes.title
    title = ""
    if title_shape is not None and title_shape.has_text_frame:
        title = _frame_text(title_shape.text_frame)
        if title.strip():
            lines.append(title)
    for shape in slide.shapes:
        if title_shape is not None and shape.shape_id == title_shape.shape_id:
            continue
        _shape_text(shape, lines, context, number)
    if slide.has_notes_slide:
        frame = slide.notes_slide.notes_text_frame
        notes = _frame_text(frame).strip() if frame is not None else ""
        if notes:
            lines.append(f"Notes: {notes}")
    return title, "\n".join(line for line in lines if line.strip())


def _shape_text(shape: Any, lines: list[str], context: ReadContext, number: int) -> None:
    # isinstance, not shape_type: shape_type raises NotImplementedError for shapes it does not know
    from pptx.shapes.group import GroupShape
    from pptx.shapes.picture import Picture

    if isinstance(shape, GroupShape):
        for inner in shape.shapes:
            _shape_text(inner, lines, context, number)
        return
    if shape.has_text_frame:
        lines.append(_frame_text(shape.text_frame))
    if getattr(shape, "has_table", False) and shape.has_table:
        for row in shape.table.rows:
            cells = [one_line(cell.text) for cell in row.cells if not cell.is_spanned]
            if any(cells):
                lines.append(" | ".join(cells))
    if getattr(shape, "has_chart", False) and shape.has_chart:
        try:
            lines += _chart_lines(shape.chart)
        except Exception as exc:  # charts come in many shapes python-pptx reads only in part
            context.warn(f"{context.title}: a chart on slide {number} could not be read ({short_reason(exc)})")
    alt = _alt_text(shape)
    if alt:
        kind = "Image" if isinstance(shape, Picture) else "Alt text"
        lines.append(f"[{kind}: {alt}]")


def _frame_text(frame: Any) -> str:
    # python-pptx writes a line break inside a paragraph as a vertical tab
    lines = []
    for paragraph in frame.paragraphs:
        text = paragraph.text.replace("\v", "\n")
        if text.strip():
            lines.append("  " * min(paragraph.level, 8) + text)
    return "\n".join(lines)


def _alt_text(shape: Any) -> str:
    """A shape's description (its cNvPr descr, else title): the alt text of a picture."""
    for properties in shape.element.iter("{http://schemas.openxmlformats.org/presentationml/2006/main}cNvPr"):
        alt = properties.get("descr") or properties.get("title") or ""
        return one_line(alt)
    return ""


def _chart_lines(chart: Any) -> list[str]:
    lines = []
    if chart.has_title and chart.chart_title.has_text_frame:
        title = one_line(chart.chart_title.text_frame.text)
        lines.append(f"Chart: {title}" if title else "Chart")
    else:
        lines.append("Chart")
    for plot in chart.plots:
        try:
            categories = [one_line(str(c)) for c in plot.categories]
        except Exception:  # XY and bubble plots have no categories
            categories = []
        for series in plot.series:
            values = [cell_text(v) for v in series.values]
            if len(categories) == len(values):
                shown = ", ".join(f"{c} = {v}" for c, v in zip(categories, values))
            else:
                shown = ", ".join(values)
            name = one_line(series.name or "")
            lines.append(f"Series {name}: {shown}" if name else f"Series: {shown}")
    return lines


# --------------------------------------------------------------------------------------------
# OpenDocument presentations (.odp)


def read_odp(file: BinaryIO, context: ReadContext) -> Iterator[Part]:
    """An OpenDocument presentation's slides (draw:page), one part each, with speaker notes."""
    document = load_odf(file, context, "odp")
    body = getattr(document, "presentation", None)
    if body is None:
        raise unreadable(context.title, what_of("odp"), "it holds no slides (another OpenDocument kind?)", DAMAGED_HINT)
    number = 0
    for page in body.childNodes:
        if page.nodeType != ELEMENT or page.qname != (DRAW, "page"):
            continue
        number += 1
        try:
            odf = Odf()
            lines = [text for text, _ in odf.blocks(page) if text.strip()]
            for notes in odf_elements(page, (PRESENTATION, "notes")):
                said = "\n".join(text for text, _ in odf.blocks(notes) if text.strip())
                if said:
                    lines.append(f"Notes: {said}")
            lines += odf.notes + odf.comments
            title = _odp_title(page) or page.getAttrNS(DRAW, "name") or ""
        except Exception as exc:  # one damaged slide loses that slide
            context.warn(f"{context.title}: slide {number} could not be read ({short_reason(exc)})")
            continue
        yield Part("\n".join(lines), Place("slide", number, unit_label(title)))


def _odp_title(page: Any) -> str:
    for frame in odf_elements(page, (DRAW, "frame")):
        if frame.getAttrNS(PRESENTATION, "class") == "title":
            return " ".join(text for text, _ in Odf().blocks(frame))
    return ""
