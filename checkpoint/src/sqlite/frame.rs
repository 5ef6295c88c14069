//! The framing of a step's updates inside one `steps.updates` cell:
//! repeated `[task u32 LE][node length u16 LE][node][blob length u32 LE][blob]`.

use crate::codec::Blob;
use crate::error::StoreError;
use crate::ids::{RunId, TaskKey};
use crate::record::TaskUpdate;
use crate::CodecError;

pub(crate) fn encode(updates: &[TaskUpdate]) -> Vec<u8> {
    let mut out = Vec::with_capacity(
        updates.iter().map(|u| 10 + u.task.node.len() + u.update.stored_len()).sum(),
    );
    for update in updates {
        let blob = update.update.to_bytes();
        out.extend_from_slice(&update.task.index.to_le_bytes());
        let node = update.task.node.as_bytes();
        out.extend_from_slice(&(node.len().min(u16::MAX as usize) as u16).to_le_bytes());
        out.extend_from_slice(&node[..node.len().min(u16::MAX as usize)]);
        out.extend_from_slice(&(blob.len() as u32).to_le_bytes());
        out.extend_from_slice(&blob);
    }
    out
}

pub(crate) fn decode(
    run: RunId,
    step: u64,
    mut bytes: &[u8],
) -> Result<Vec<TaskUpdate>, StoreError> {
    let truncated = |len| StoreError::CorruptCheckpoint {
        run,
        step,
        source: CodecError::Truncated { len, min: 10 },
    };
    let mut updates = Vec::new();
    while !bytes.is_empty() {
        let take = |bytes: &mut &[u8], n: usize| -> Result<Vec<u8>, StoreError> {
            if bytes.len() < n {
                return Err(truncated(bytes.len()));
            }
            let (head, tail) = bytes.split_at(n);
            *bytes = tail;
            Ok(head.to_vec())
        };
        let index = u32::from_le_bytes(take(&mut bytes, 4)?.try_into().map_err(|_| truncated(0))?);
        let node_len =
            u16::from_le_bytes(take(&mut bytes, 2)?.try_into().map_err(|_| truncated(0))?);
        let node =
            String::from_utf8(take(&mut bytes, node_len as usize)?).map_err(|_| truncated(0))?;
        let blob_len =
            u32::from_le_bytes(take(&mut bytes, 4)?.try_into().map_err(|_| truncated(0))?);
        let blob = Blob::from_bytes(&take(&mut bytes, blob_len as usize)?)
            .map_err(|source| StoreError::CorruptCheckpoint { run, step, source })?;
        updates.push(TaskUpdate { task: TaskKey { step, index, node }, update: blob });
    }
    Ok(updates)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Codec;

    #[test]
    fn round_trips_and_refuses_cut_frames() {
        let run = RunId::new();
        let updates: Vec<TaskUpdate> = (0..3)
            .map(|i| TaskUpdate {
                task: TaskKey { step: 4, index: i, node: format!("node-{i}") },
                update: Codec::Json.encode(&vec![i; i as usize], 1).expect("encode"),
            })
            .collect();
        let bytes = encode(&updates);
        assert_eq!(decode(run, 4, &bytes).expect("decode"), updates);
        for cut in [1, 5, bytes.len() - 1] {
            let error = decode(run, 4, &bytes[..cut]).expect_err("cut frame");
            assert!(matches!(error, StoreError::CorruptCheckpoint { step: 4, .. }), "{error:?}");
        }
        assert!(decode(run, 4, &[]).expect("empty").is_empty());
    }
}
