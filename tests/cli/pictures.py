"""Reading cells back from a picture ``batchaug.show`` drew."""
from typing import Optional, Sequence, Tuple

from batchaug.picture import _layout


def cell_origin(row: int, column: int, cell_h: int, cell_w: int, n_columns: int,
                row_labels: Optional[Sequence[str]] = None,
                column_labels: Optional[Sequence[str]] = None, pad: int = 2) -> Tuple[int, int]:
    """(top, left) pixel of the cell at ``row``, ``column`` in a picture ``show`` drew with these
    labels, for images of ``cell_h`` x ``cell_w``."""
    _, _, top0, col_w, col_x = _layout(n_columns, cell_w, row_labels, column_labels, pad)
    return top0 + pad + row * (cell_h + pad), col_x[column] + (col_w[column] - cell_w) // 2
