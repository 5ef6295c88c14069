//! The graph drawing as the browser shows it, checked: every edge of the
//! graph is drawn, and no edge's path passes through a node box that is
//! not one of its ends (nor into a subgraph box from outside).

use fantoccini::Client;
use serde_json::Value;

/// A node's box as drawn.
struct Drawn {
    path: String,
    x: f64,
    y: f64,
    width: f64,
    height: f64,
}

/// Reads the drawing's boxes and edge paths from the page.
const READ: &str = r#"
const number = (element, name) => Number(element.getAttribute(name));
const boxes = [...document.querySelectorAll('#graph g.node')].map((g) => {
  const rect = g.querySelector(':scope > rect');
  return { path: g.dataset.node, x: number(rect, 'x'), y: number(rect, 'y'), width: number(rect, 'width'), height: number(rect, 'height') };
});
const edges = [...document.querySelectorAll('#graph g.edge-group')].map((g) => ({
  from: g.dataset.from, to: g.dataset.to, d: g.querySelector('path').getAttribute('d'),
}));
return { boxes, edges };
"#;

#[path = "../../../server/src/http/page/layout/segment.rs"]
mod segment;

/// Whether the segment `p`–`q` enters the inside of `node`'s box.
fn enters(p: (f64, f64), q: (f64, f64), node: &Drawn) -> bool {
    segment::enters(p, q, (node.x, node.y, node.width, node.height))
}

/// The points of an SVG path `M x,y L x,y …`.
fn points(d: &str) -> Vec<(f64, f64)> {
    d.split_whitespace()
        .map(|part| {
            let (x, y) = part[1..].split_once(',').unwrap();
            (x.parse().unwrap(), y.parse().unwrap())
        })
        .collect()
}

/// Checks the drawing on `page` against `graph` (`GET /runs/{id}/graph`
/// with the same subgraphs open): the edges drawn at the top level are
/// the graph's edges, and no edge crosses a box it does not end at.
/// Returns how many edges were drawn.
pub(crate) async fn check_drawing(page: &Client, graph: &Value) -> usize {
    let read = page.execute(READ, vec![]).await.unwrap();
    let boxes: Vec<Drawn> = read["boxes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| Drawn {
            path: b["path"].as_str().unwrap().to_owned(),
            x: b["x"].as_f64().unwrap(),
            y: b["y"].as_f64().unwrap(),
            width: b["width"].as_f64().unwrap(),
            height: b["height"].as_f64().unwrap(),
        })
        .collect();
    let edges = read["edges"].as_array().unwrap();
    let mut drawn: Vec<(String, String)> = edges
        .iter()
        .map(|e| (e["from"].as_str().unwrap().to_owned(), e["to"].as_str().unwrap().to_owned()))
        .filter(|(from, _)| !from.contains('/'))
        .collect();
    let mut wanted: Vec<(String, String)> = graph["edges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["from"].as_str().unwrap().to_owned(), e["to"].as_str().unwrap().to_owned()))
        .collect();
    drawn.sort();
    wanted.sort();
    assert_eq!(drawn, wanted, "every edge of the graph is drawn, and nothing else");
    let inside = |inner: &str, outer: &str| inner.starts_with(&format!("{outer}/"));
    for edge in edges {
        let (from, to) = (edge["from"].as_str().unwrap(), edge["to"].as_str().unwrap());
        let line = points(edge["d"].as_str().unwrap());
        assert!(line.len() >= 2, "{edge}");
        for node in &boxes {
            if node.path == from
                || node.path == to
                || (inside(from, &node.path) && inside(to, &node.path))
            {
                continue;
            }
            for w in line.windows(2) {
                assert!(
                    !enters(w[0], w[1], node),
                    "{from} -> {to} passes through {}: {line:?}",
                    node.path
                );
            }
        }
    }
    edges.len()
}
