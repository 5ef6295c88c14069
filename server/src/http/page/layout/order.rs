//! The drawing's layer order: which edges close a cycle (drawn back up),
//! and the sweeps that reorder each layer to cut crossings.

/// Which edges close a cycle, found walking depth-first from node 0,
/// then from each node not yet reached, in order.
pub(super) fn back_edges(n: usize, edges: &[(usize, usize)]) -> Vec<bool> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        Open,
        Done,
    }
    let mut out: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (e, &(a, _)) in edges.iter().enumerate() {
        out[a].push(e);
    }
    let mut mark = vec![Mark::New; n];
    let mut back = vec![false; edges.len()];
    for root in 0..n {
        if mark[root] != Mark::New {
            continue;
        }
        mark[root] = Mark::Open;
        let mut stack = vec![(root, 0usize)];
        while let Some(&mut (v, ref mut next)) = stack.last_mut() {
            if let Some(&e) = out[v].get(*next) {
                *next += 1;
                let w = edges[e].1;
                match mark[w] {
                    Mark::Open => back[e] = true,
                    Mark::New => {
                        mark[w] = Mark::Open;
                        stack.push((w, 0));
                    }
                    Mark::Done => {}
                }
            } else {
                mark[v] = Mark::Done;
                stack.pop();
            }
        }
    }
    back
}

/// One sweep of reordering: each rank sorted by the mean position of its
/// items' neighbours in the rank above (`down`) or below.
pub(super) fn sweep_order(
    layers: &mut [Vec<usize>],
    segments: &[(usize, usize)],
    count: usize,
    down: bool,
) {
    let ranks = layers.len();
    let order: Vec<usize> =
        if down { (1..ranks).collect() } else { (0..ranks.saturating_sub(1)).rev().collect() };
    let mut position = vec![0.0f64; count];
    for layer in layers.iter() {
        for (k, &item) in layer.iter().enumerate() {
            position[item] = k as f64;
        }
    }
    for r in order {
        let mut keyed: Vec<(f64, usize)> = layers[r]
            .iter()
            .map(|&item| {
                let near: Vec<f64> = segments
                    .iter()
                    .filter_map(|&(a, b)| match down {
                        true if b == item => Some(position[a]),
                        false if a == item => Some(position[b]),
                        _ => None,
                    })
                    .collect();
                let key = if near.is_empty() {
                    position[item]
                } else {
                    near.iter().sum::<f64>() / near.len() as f64
                };
                (key, item)
            })
            .collect();
        keyed.sort_by(|a, b| a.0.total_cmp(&b.0));
        layers[r] = keyed.into_iter().map(|(_, item)| item).collect();
        for (k, &item) in layers[r].iter().enumerate() {
            position[item] = k as f64;
        }
    }
}

/// How many pairs of segments cross between adjacent ranks.
pub(super) fn crossings(layers: &[Vec<usize>], segments: &[(usize, usize)], count: usize) -> usize {
    let mut position = vec![0usize; count];
    for layer in layers {
        for (k, &item) in layer.iter().enumerate() {
            position[item] = k;
        }
    }
    let mut found = 0;
    for (i, &(a1, b1)) in segments.iter().enumerate() {
        for &(a2, b2) in &segments[i + 1..] {
            let (pa1, pb1, pa2, pb2) = (position[a1], position[b1], position[a2], position[b2]);
            if (pa1 < pa2 && pb1 > pb2) || (pa1 > pa2 && pb1 < pb2) {
                found += 1;
            }
        }
    }
    found
}
