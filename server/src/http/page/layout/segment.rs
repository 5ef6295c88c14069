//! Whether a segment of an edge enters a node's box: the check of the
//! layout's tests, shared with the review page's browser tests (which
//! include this file by path).

/// Whether the segment from `p` to `q` enters the inside of the box
/// `(x, y, width, height)`; its border, and a hair inside it, do not
/// count. Liang–Barsky: the segment clipped to the box is not empty.
pub(crate) fn enters(p: (f64, f64), q: (f64, f64), rect: (f64, f64, f64, f64)) -> bool {
    let hair = 0.6;
    let (x0, y0) = (rect.0 + hair, rect.1 + hair);
    let (x1, y1) = (rect.0 + rect.2 - hair, rect.1 + rect.3 - hair);
    let (dx, dy) = (q.0 - p.0, q.1 - p.1);
    let (mut low, mut high) = (0.0f64, 1.0f64);
    for (edge, distance) in [(-dx, p.0 - x0), (dx, x1 - p.0), (-dy, p.1 - y0), (dy, y1 - p.1)] {
        if edge == 0.0 {
            if distance < 0.0 {
                return false;
            }
        } else if edge < 0.0 {
            low = low.max(distance / edge);
        } else {
            high = high.min(distance / edge);
        }
    }
    low < high
}
