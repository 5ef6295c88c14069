//! Placing a drawing's nodes and routing its edges (the Sugiyama
//! method's phases, numbered as in `place`).

use super::order::{back_edges, crossings, sweep_order};
use super::{
    GAP_NODES, GAP_NODE_SLOT, GAP_RANKS, GAP_SLOTS, LOOP, MARGIN, NODE_H, ORDER_ROUNDS,
    PLACE_ROUNDS, SLOT_W,
};

/// An edge's polyline and its label's place.
pub(super) type Route = (Vec<(f64, f64)>, LabelPlace);

/// Where an edge's label goes, and on which side (see `Line`).
pub(super) type LabelPlace = Option<((f64, f64), &'static str)>;

/// What [`place`] found: each node's top-left corner, each edge's
/// polyline and label place, the drawing's size.
pub(super) struct Placement {
    pub(super) corners: Vec<(f64, f64)>,
    pub(super) routes: Vec<Route>,
    pub(super) width: f64,
    pub(super) height: f64,
}

/// An entry of a rank: a node, or the slot of a long edge.
#[derive(Clone, Copy)]
struct Item {
    rank: usize,
    width: f64,
    node: bool,
}

/// Lays out nodes of `sizes` joined by `edges` (`end`, if given, at the
/// bottom). Node 0 is taken first when looking for cycles. In phases:
/// cycles broken, ranks, slots for long edges, orders within ranks,
/// positions, bands, ports, routes.
pub(super) fn place(
    sizes: &[(f64, f64)],
    edges: &[(usize, usize)],
    end: Option<usize>,
) -> Placement {
    let n = sizes.len();
    // 1. Cycles: a depth-first walk from each node in turn (the entry
    //    first); an edge back to a node still on the walk is reversed.
    let reversed = back_edges(n, edges);
    let dag: Vec<(usize, usize)> = edges
        .iter()
        .zip(&reversed)
        .map(|(&(a, b), &back)| if back { (b, a) } else { (a, b) })
        .collect();
    let rank = ranks(n, &dag, end);
    let (items, chains) = slots(sizes, &rank, &dag);
    let ranks = items.iter().map(|item| item.rank + 1).max().unwrap_or(0);
    let segments: Vec<(usize, usize)> =
        chains.iter().flat_map(|c| c.windows(2).map(|w| (w[0], w[1]))).collect();
    let layers = orders(&items, &segments, ranks);
    let centre = positions(&items, &segments, &layers, ranks);
    let bands = Bands::of(sizes, &rank, ranks);
    let corners: Vec<(f64, f64)> = (0..n)
        .map(|v| {
            let (top, h) = (bands.top[rank[v]], bands.height[rank[v]]);
            (centre[v] - sizes[v].0 / 2.0, top + (h - sizes[v].1) / 2.0)
        })
        .collect();
    let ports = ports(sizes, &chains, &centre, &corners);
    let drawn = Drawn { sizes, rank: &rank, items: &items, centre: &centre, corners: &corners };
    let edges = Edges { chains: &chains, dag: &dag, reversed: &reversed };
    let (routes, right) = routes(&drawn, &bands, &ports, &edges);
    let height = bands.bottom.last().copied().unwrap_or(MARGIN) + MARGIN;
    Placement { corners, routes, width: right + MARGIN, height }
}

/// 2. Ranks: the longest path from a source; the end below everything.
fn ranks(n: usize, dag: &[(usize, usize)], end: Option<usize>) -> Vec<usize> {
    let mut rank = vec![0usize; n];
    let mut incoming = vec![0usize; n];
    for &(a, b) in dag {
        if a != b {
            incoming[b] += 1;
        }
    }
    let mut ready: Vec<usize> = (0..n).filter(|&v| incoming[v] == 0).collect();
    while let Some(v) = ready.pop() {
        for &(a, b) in dag {
            if a == v && a != b {
                rank[b] = rank[b].max(rank[a] + 1);
                incoming[b] -= 1;
                if incoming[b] == 0 {
                    ready.push(b);
                }
            }
        }
    }
    if let Some(end) = end {
        let deepest = (0..n).filter(|&v| v != end).map(|v| rank[v]).max();
        if let Some(deepest) = deepest {
            rank[end] = rank[end].max(deepest + 1);
        }
    }
    rank
}

/// 3. Slots: each edge becomes a chain of items, one per rank it touches
///    (self-loops have none).
fn slots(
    sizes: &[(f64, f64)],
    rank: &[usize],
    dag: &[(usize, usize)],
) -> (Vec<Item>, Vec<Vec<usize>>) {
    let mut items: Vec<Item> =
        (0..sizes.len()).map(|v| Item { rank: rank[v], width: sizes[v].0, node: true }).collect();
    let mut chains: Vec<Vec<usize>> = Vec::with_capacity(dag.len());
    for &(a, b) in dag {
        if a == b {
            chains.push(Vec::new());
            continue;
        }
        let mut chain = vec![a];
        for r in rank[a] + 1..rank[b] {
            items.push(Item { rank: r, width: SLOT_W, node: false });
            chain.push(items.len() - 1);
        }
        chain.push(b);
        chains.push(chain);
    }
    (items, chains)
}

/// 4. Orders: first as found walking down from the top, then sorted by
///    the mean position of neighbours, sweeping down and up; the order
///    with fewest crossings is kept.
fn orders(items: &[Item], segments: &[(usize, usize)], ranks: usize) -> Vec<Vec<usize>> {
    let mut layers = first_order(items, segments, ranks);
    let mut best = (crossings(&layers, segments, items.len()), layers.clone());
    for round in 0..ORDER_ROUNDS {
        let down = round % 2 == 0;
        sweep_order(&mut layers, segments, items.len(), down);
        let found = crossings(&layers, segments, items.len());
        if found < best.0 {
            best = (found, layers.clone());
        }
    }
    best.1
}

/// 5. Positions: centres pulled toward the mean of their neighbours
///    (above, then below), kept apart, in order; shifted to the margin.
fn positions(
    items: &[Item],
    segments: &[(usize, usize)],
    layers: &[Vec<usize>],
    ranks: usize,
) -> Vec<f64> {
    let mut centre = vec![0.0f64; items.len()];
    for layer in layers {
        let mut x = 0.0;
        for (k, &item) in layer.iter().enumerate() {
            if k > 0 {
                x += gap(&items[layer[k - 1]], &items[item]);
            }
            centre[item] = x;
        }
    }
    for round in 0..PLACE_ROUNDS {
        let down = round % 2 == 0;
        let order: Vec<usize> =
            if down { (1..ranks).collect() } else { (0..ranks.saturating_sub(1)).rev().collect() };
        for r in order {
            let layer = &layers[r];
            let wanted: Vec<f64> = layer
                .iter()
                .map(|&item| {
                    let near: Vec<f64> = segments
                        .iter()
                        .filter_map(|&(a, b)| match down {
                            true if b == item => Some(centre[a]),
                            false if a == item => Some(centre[b]),
                            _ => None,
                        })
                        .collect();
                    if near.is_empty() {
                        centre[item]
                    } else {
                        near.iter().sum::<f64>() / near.len() as f64
                    }
                })
                .collect();
            let seps: Vec<f64> =
                layer.windows(2).map(|w| gap(&items[w[0]], &items[w[1]])).collect();
            for (&item, x) in layer.iter().zip(fit(&wanted, &seps)) {
                centre[item] = x;
            }
        }
    }
    let left =
        (0..items.len()).map(|i| centre[i] - items[i].width / 2.0).fold(f64::INFINITY, f64::min);
    let shift = if left.is_finite() { MARGIN - left } else { MARGIN };
    centre.iter_mut().for_each(|x| *x += shift);
    centre
}

/// 6. Bands: each rank as tall as its tallest node; where each starts
///    and ends.
struct Bands {
    top: Vec<f64>,
    height: Vec<f64>,
    bottom: Vec<f64>,
}

impl Bands {
    fn of(sizes: &[(f64, f64)], rank: &[usize], ranks: usize) -> Self {
        let mut band_h = vec![0.0f64; ranks];
        for (v, size) in sizes.iter().enumerate() {
            band_h[rank[v]] = band_h[rank[v]].max(size.1);
        }
        for h in &mut band_h {
            if *h == 0.0 {
                *h = NODE_H / 2.0;
            }
        }
        let mut top = vec![MARGIN; ranks];
        for r in 1..ranks {
            top[r] = top[r - 1] + band_h[r - 1] + GAP_RANKS;
        }
        let bottom = (0..ranks).map(|r| top[r] + band_h[r]).collect();
        Self { top, height: band_h, bottom }
    }
}

/// Where each edge leaves its source's bottom and enters its target's
/// top.
struct Ports {
    out: Vec<f64>,
    into: Vec<f64>,
}

/// 7. Ports: the edges leaving a node's bottom (entering its top) spread
///    along it, in the order of where they go (come from).
fn ports(
    sizes: &[(f64, f64)],
    chains: &[Vec<usize>],
    centre: &[f64],
    corners: &[(f64, f64)],
) -> Ports {
    let n = sizes.len();
    let mut bottom: Vec<Vec<(f64, usize)>> = vec![Vec::new(); n];
    let mut top: Vec<Vec<(f64, usize)>> = vec![Vec::new(); n];
    for (e, chain) in chains.iter().enumerate() {
        if chain.len() < 2 {
            continue;
        }
        bottom[chain[0]].push((centre[chain[1]], e));
        top[chain[chain.len() - 1]].push((centre[chain[chain.len() - 2]], e));
    }
    let mut out_port = vec![0.0; chains.len()];
    let mut in_port = vec![0.0; chains.len()];
    for v in 0..n {
        for (ports, slot) in [(&mut bottom[v], &mut out_port), (&mut top[v], &mut in_port)] {
            ports.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
            let (left, width) = (corners[v].0, sizes[v].0);
            let count = ports.len() as f64;
            for (k, &(_, e)) in ports.iter().enumerate() {
                slot[e] = left + width * (k as f64 + 1.0) / (count + 1.0);
            }
        }
    }
    Ports { out: out_port, into: in_port }
}

/// The edges as chains of items, the DAG they were ranked on, and which
/// were reversed.
struct Edges<'a> {
    chains: &'a [Vec<usize>],
    dag: &'a [(usize, usize)],
    reversed: &'a [bool],
}

/// What the routes are drawn between.
struct Drawn<'a> {
    sizes: &'a [(f64, f64)],
    rank: &'a [usize],
    items: &'a [Item],
    centre: &'a [f64],
    corners: &'a [(f64, f64)],
}

/// 8. Routes, drawn downward along the chain, then turned round for
///    reversed edges so that every line starts at its real source; and
///    the drawing's right edge.
fn routes(drawn: &Drawn<'_>, bands: &Bands, ports: &Ports, edges: &Edges<'_>) -> (Vec<Route>, f64) {
    let Edges { chains, dag, reversed } = *edges;
    let Drawn { sizes, rank, items, centre, corners } = *drawn;
    let mut right = (0..items.len()).map(|i| centre[i] + items[i].width / 2.0).fold(0.0, f64::max);
    let mut routes = Vec::with_capacity(dag.len());
    for (e, chain) in chains.iter().enumerate() {
        if chain.is_empty() {
            let v = dag[e].0;
            let (x, y) = corners[v];
            let (w, h) = sizes[v];
            let (mid, out) = (y + h / 2.0, x + w + LOOP);
            right = right.max(out);
            let points =
                vec![(x + w, mid - 8.0), (out, mid - 8.0), (out, mid + 8.0), (x + w, mid + 8.0)];
            routes.push((points, Some(((out, mid), "start"))));
            continue;
        }
        let (a, b) = (chain[0], chain[chain.len() - 1]);
        let mut points = vec![(ports.out[e], corners[a].1 + sizes[a].1)];
        if bands.bottom[rank[a]] > points[0].1 {
            points.push((ports.out[e], bands.bottom[rank[a]]));
        }
        for &slot in &chain[1..chain.len() - 1] {
            let r = items[slot].rank;
            points.push((centre[slot], bands.top[r]));
            points.push((centre[slot], bands.bottom[r]));
        }
        let b_top = corners[b].1;
        if bands.top[rank[b]] < b_top {
            points.push((ports.into[e], bands.top[rank[b]]));
        }
        points.push((ports.into[e], b_top));
        if reversed[e] {
            points.reverse();
        }
        // The label sits halfway along the first part crossing a band
        // between ranks, on the side the line heads away from.
        let label = points
            .windows(2)
            .find(|w| (w[0].1 - w[1].1).abs() > 1.0 && band_gap(w, &bands.top, &bands.bottom))
            .map(|w| {
                let anchor = if w[1].0 < w[0].0 - 1.0 { "end" } else { "start" };
                (((w[0].0 + w[1].0) / 2.0, (w[0].1 + w[1].1) / 2.0), anchor)
            });
        routes.push((points, label));
    }
    (routes, right)
}

/// Whether the segment `w` lies in a band between ranks.
fn band_gap(w: &[(f64, f64)], band_top: &[f64], band_bottom: &[f64]) -> bool {
    let (low, high) = (w[0].1.min(w[1].1), w[0].1.max(w[1].1));
    band_bottom
        .iter()
        .zip(band_top.iter().skip(1))
        .any(|(&b, &t)| low >= b - 0.5 && high <= t + 0.5)
}

/// The items of each rank in the order a walk down the segments first
/// meets them (items never met last).
fn first_order(items: &[Item], segments: &[(usize, usize)], ranks: usize) -> Vec<Vec<usize>> {
    let mut layers: Vec<Vec<usize>> = vec![Vec::new(); ranks];
    let mut seen = vec![false; items.len()];
    let mut queue = std::collections::VecDeque::new();
    for start in 0..items.len() {
        if seen[start] || !items[start].node {
            continue;
        }
        seen[start] = true;
        queue.push_back(start);
        while let Some(v) = queue.pop_front() {
            layers[items[v].rank].push(v);
            for &(a, b) in segments {
                if a == v && !seen[b] {
                    seen[b] = true;
                    queue.push_back(b);
                }
            }
        }
    }
    for (i, item) in items.iter().enumerate() {
        if !seen[i] {
            layers[item.rank].push(i);
        }
    }
    layers
}

/// The space between the centres of two neighbours in a rank.
fn gap(left: &Item, right: &Item) -> f64 {
    let space = match (left.node, right.node) {
        (true, true) => GAP_NODES,
        (false, false) => GAP_SLOTS,
        _ => GAP_NODE_SLOT,
    };
    left.width / 2.0 + space + right.width / 2.0
}

/// Positions as close as can be (least squares) to `wanted`, in order,
/// each at least `seps[i]` after the one before: with each position
/// measured from its least offset the constraint is plain order, solved
/// by pooling adjacent violators.
pub(super) fn fit(wanted: &[f64], seps: &[f64]) -> Vec<f64> {
    let mut offset = vec![0.0; wanted.len()];
    for i in 1..wanted.len() {
        offset[i] = offset[i - 1] + seps[i - 1];
    }
    // Blocks of (mean, size) of the shifted targets.
    let mut blocks: Vec<(f64, usize)> = Vec::new();
    for (w, o) in wanted.iter().zip(&offset) {
        blocks.push((w - o, 1));
        while let [.., (m1, n1), (m2, n2)] = blocks[..] {
            if m1 <= m2 {
                break;
            }
            blocks.truncate(blocks.len() - 2);
            let size = n1 + n2;
            blocks.push(((m1 * n1 as f64 + m2 * n2 as f64) / size as f64, size));
        }
    }
    blocks
        .into_iter()
        .flat_map(|(mean, size)| std::iter::repeat_n(mean, size))
        .zip(&offset)
        .map(|(y, o)| y + o)
        .collect()
}
