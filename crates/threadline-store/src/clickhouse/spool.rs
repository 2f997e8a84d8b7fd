//! The durable spool in front of ClickHouse: when an insert round cannot reach
//! ClickHouse (or while earlier rounds still wait), the round is appended here and
//! fsynced before its writes are acknowledged; a sender replays the records in order,
//! with backoff, and moves a checkpoint past each one ClickHouse took. Bounded in
//! bytes: past the bound, writes are refused (`Busy`: 429 / RESOURCE_EXHAUSTED).
//!
//! On disk (the replica's local directory, `spool/`): segment files `{id:016}.spool`
//! of records `[length u32 LE][crc32 u32 LE][payload]`, rolled at `SEGMENT_BYTES`,
//! and `checkpoint` (`{segment id} {offset}`: the next record to send), replaced
//! atomically. A record torn by a crash (it was never acknowledged) is cut off at open.
//! Delivery is at least once — a record sent whose checkpoint did not move is sent
//! again after a crash — and the tables' keys collapse the second copy.

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::StoreError;

/// A segment is closed and a new one started past this size.
const SEGMENT_BYTES: u64 = 64 * 1024 * 1024;
const HEADER: u64 = 8;
const CHECKPOINT: &str = "checkpoint";

/// Where the next record to send starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Position {
    segment: u64,
    offset: u64,
}

struct Segment {
    id: u64,
    len: u64,
}

struct Inner {
    /// Segments not wholly sent, oldest first; appends go to the last.
    segments: VecDeque<Segment>,
    /// The open last segment.
    writer: Option<File>,
    read: Position,
}

/// What the spool holds (health, `/metrics`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SpoolStats {
    /// Bytes of records not yet taken by ClickHouse.
    pub bytes: u64,
    pub records: u64,
    /// The bound past which writes are refused.
    pub max_bytes: u64,
}

pub(crate) struct Spool {
    dir: PathBuf,
    max_bytes: u64,
    inner: Mutex<Inner>,
    pending_bytes: AtomicU64,
    pending_records: AtomicU64,
    /// Woken when a record is appended.
    pub(crate) appended: tokio::sync::Notify,
}

fn io_err(what: String) -> impl FnOnce(std::io::Error) -> StoreError {
    move |source| StoreError::unavailable(what).with_source(source)
}

fn segment_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("{id:016}.spool"))
}

fn sync_dir(dir: &Path) -> Result<(), StoreError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err(format!("cannot sync {}", dir.display())))
}

impl Spool {
    /// Opens (creating) the spool in `dir`: reads the checkpoint, forgets segments
    /// already sent, cuts a torn last record off, counts what is left.
    pub(crate) fn open(dir: &Path, max_bytes: u64) -> Result<Self, StoreError> {
        std::fs::create_dir_all(dir).map_err(io_err(format!("cannot create {}", dir.display())))?;
        let mut ids: Vec<u64> = std::fs::read_dir(dir)
            .map_err(io_err(format!("cannot list {}", dir.display())))?
            .filter_map(|e| e.ok())
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                name.strip_suffix(".spool")?.parse().ok()
            })
            .collect();
        ids.sort_unstable();
        let read = match std::fs::read_to_string(dir.join(CHECKPOINT)) {
            Ok(text) => {
                let mut parts = text.split_whitespace().map(str::parse::<u64>);
                match (parts.next(), parts.next()) {
                    (Some(Ok(segment)), Some(Ok(offset))) => Position { segment, offset },
                    _ => {
                        return Err(StoreError::corrupt(format!(
                            "the spool checkpoint in {} is unreadable: {text:?}",
                            dir.display()
                        )))
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Position {
                segment: ids.first().copied().unwrap_or(0),
                offset: 0,
            },
            Err(e) => {
                return Err(io_err(format!(
                    "cannot read the spool checkpoint in {}",
                    dir.display()
                ))(e))
            }
        };
        let mut segments = VecDeque::new();
        for id in ids {
            let path = segment_path(dir, id);
            if id < read.segment {
                std::fs::remove_file(&path)
                    .map_err(io_err(format!("cannot remove {}", path.display())))?;
                continue;
            }
            let len = std::fs::metadata(&path)
                .map_err(io_err(format!("cannot read {}", path.display())))?
                .len();
            segments.push_back(Segment { id, len });
        }
        let spool = Self {
            dir: dir.to_owned(),
            max_bytes,
            inner: Mutex::new(Inner {
                segments,
                writer: None,
                read,
            }),
            pending_bytes: AtomicU64::new(0),
            pending_records: AtomicU64::new(0),
            appended: tokio::sync::Notify::new(),
        };
        spool.recount()?;
        Ok(spool)
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, Inner>, StoreError> {
        self.inner.lock().map_err(|_| StoreError::poisoned("spool"))
    }

    /// Counts the records after the checkpoint, cutting a torn tail off the last
    /// segment.
    fn recount(&self) -> Result<(), StoreError> {
        let mut inner = self.lock()?;
        let (mut bytes, mut records) = (0, 0);
        let last = inner.segments.back().map(|s| s.id);
        let read = inner.read;
        for segment in inner.segments.iter_mut() {
            let path = segment_path(&self.dir, segment.id);
            let mut file =
                File::open(&path).map_err(io_err(format!("cannot open {}", path.display())))?;
            let mut at = if segment.id == read.segment {
                read.offset
            } else {
                0
            };
            while let Some(payload) = read_record(&mut file, at, segment.len)? {
                at += HEADER + payload.len() as u64;
                bytes += HEADER + payload.len() as u64;
                records += 1;
            }
            if at < segment.len {
                if Some(segment.id) != last {
                    return Err(StoreError::corrupt(format!(
                        "spool segment {} is damaged at byte {at}",
                        path.display()
                    )));
                }
                // A record torn by a crash: never acknowledged, cut off.
                let f = OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .map_err(io_err(format!("cannot open {}", path.display())))?;
                f.set_len(at)
                    .and_then(|()| f.sync_all())
                    .map_err(io_err(format!("cannot truncate {}", path.display())))?;
                segment.len = at;
            }
        }
        self.pending_bytes.store(bytes, Ordering::SeqCst);
        self.pending_records.store(records, Ordering::SeqCst);
        Ok(())
    }

    pub(crate) fn stats(&self) -> SpoolStats {
        SpoolStats {
            bytes: self.pending_bytes.load(Ordering::SeqCst),
            records: self.pending_records.load(Ordering::SeqCst),
            max_bytes: self.max_bytes,
        }
    }

    /// Whether records wait to be sent (new rounds then go behind them).
    pub(crate) fn holds_records(&self) -> bool {
        self.pending_records.load(Ordering::SeqCst) > 0
    }

    /// Appends a record and makes it durable (fsync); `Busy` when the spool is full.
    pub(crate) fn append(&self, payload: &[u8]) -> Result<(), StoreError> {
        let size = HEADER + payload.len() as u64;
        let held = self.pending_bytes.load(Ordering::SeqCst);
        if held + size > self.max_bytes {
            return Err(StoreError::busy(format!(
                "ClickHouse is not taking writes and the spool is full ({held} of {} bytes)",
                self.max_bytes
            )));
        }
        let mut inner = self.lock()?;
        let roll = inner
            .segments
            .back()
            .is_none_or(|s| s.len + size > SEGMENT_BYTES && s.len > 0);
        if roll || inner.writer.is_none() {
            let id = if roll {
                inner
                    .segments
                    .back()
                    .map_or(inner.read.segment, |s| s.id + 1)
            } else {
                inner.segments.back().map_or(0, |s| s.id)
            };
            let path = segment_path(&self.dir, id);
            let file = OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
                .map_err(io_err(format!("cannot open {}", path.display())))?;
            if roll {
                sync_dir(&self.dir)?;
                inner.segments.push_back(Segment { id, len: 0 });
            }
            inner.writer = Some(file);
        }
        let mut record = Vec::with_capacity(size as usize);
        record.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        record.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
        record.extend_from_slice(payload);
        let path = segment_path(&self.dir, inner.segments.back().map_or(0, |s| s.id));
        let file = inner
            .writer
            .as_mut()
            .ok_or_else(|| StoreError::poisoned("spool writer"))?;
        file.write_all(&record)
            .and_then(|()| file.sync_data())
            .map_err(io_err(format!("cannot append to {}", path.display())))?;
        if let Some(last) = inner.segments.back_mut() {
            last.len += size;
        }
        self.pending_bytes.fetch_add(size, Ordering::SeqCst);
        self.pending_records.fetch_add(1, Ordering::SeqCst);
        drop(inner);
        self.appended.notify_one();
        Ok(())
    }

    /// The oldest record not sent, and where the one after it starts.
    pub(crate) fn peek(&self) -> Result<Option<(Vec<u8>, Position)>, StoreError> {
        let inner = self.lock()?;
        let mut read = inner.read;
        let start = read.segment;
        for segment in inner.segments.iter().filter(|s| s.id >= start) {
            if segment.id > read.segment {
                read = Position {
                    segment: segment.id,
                    offset: 0,
                };
            }
            if read.offset >= segment.len {
                continue;
            }
            let path = segment_path(&self.dir, segment.id);
            let mut file =
                File::open(&path).map_err(io_err(format!("cannot open {}", path.display())))?;
            return match read_record(&mut file, read.offset, segment.len)? {
                Some(payload) => {
                    let next = Position {
                        segment: segment.id,
                        offset: read.offset + HEADER + payload.len() as u64,
                    };
                    Ok(Some((payload, next)))
                }
                None => Err(StoreError::corrupt(format!(
                    "spool segment {} is damaged at byte {}",
                    path.display(),
                    read.offset
                ))),
            };
        }
        Ok(None)
    }

    /// Records that everything before `next` was sent: the checkpoint moves (durably)
    /// and segments wholly sent go.
    pub(crate) fn sent_through(&self, next: Position, record_bytes: u64) -> Result<(), StoreError> {
        let mut inner = self.lock()?;
        let tmp = self.dir.join(format!("{CHECKPOINT}.tmp"));
        std::fs::write(&tmp, format!("{} {}\n", next.segment, next.offset))
            .and_then(|()| File::open(&tmp)?.sync_all())
            .and_then(|()| std::fs::rename(&tmp, self.dir.join(CHECKPOINT)))
            .map_err(io_err(format!(
                "cannot write the spool checkpoint in {}",
                self.dir.display()
            )))?;
        sync_dir(&self.dir)?;
        inner.read = next;
        while inner.segments.len() > 1
            && inner.segments.front().is_some_and(|s| s.id < next.segment)
        {
            if let Some(done) = inner.segments.pop_front() {
                let path = segment_path(&self.dir, done.id);
                std::fs::remove_file(&path)
                    .map_err(io_err(format!("cannot remove {}", path.display())))?;
            }
        }
        self.pending_bytes.fetch_sub(
            record_bytes.min(self.pending_bytes.load(Ordering::SeqCst)),
            Ordering::SeqCst,
        );
        self.pending_records.fetch_sub(
            1.min(self.pending_records.load(Ordering::SeqCst)),
            Ordering::SeqCst,
        );
        Ok(())
    }
}

/// The record at `at` of a segment of `len` bytes; `None` when none is whole there (the
/// end, or a torn or damaged record).
fn read_record(file: &mut File, at: u64, len: u64) -> Result<Option<Vec<u8>>, StoreError> {
    if at + HEADER > len {
        return Ok(None);
    }
    let mut header = [0u8; HEADER as usize];
    file.seek(SeekFrom::Start(at))
        .and_then(|_| file.read_exact(&mut header))
        .map_err(io_err("cannot read the spool".to_owned()))?;
    let size = u64::from(u32::from_le_bytes([
        header[0], header[1], header[2], header[3],
    ]));
    let crc = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
    if at + HEADER + size > len {
        return Ok(None);
    }
    let mut payload = vec![0u8; size as usize];
    file.read_exact(&mut payload)
        .map_err(io_err("cannot read the spool".to_owned()))?;
    Ok((crc32fast::hash(&payload) == crc).then_some(payload))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(spool: &Spool) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        while let Some((payload, next)) = spool.peek().unwrap() {
            let bytes = HEADER + payload.len() as u64;
            out.push(payload);
            spool.sent_through(next, bytes).unwrap();
        }
        out
    }

    #[test]
    fn records_come_back_in_order_once_across_reopens() {
        let dir = tempfile::tempdir().unwrap();
        let spool = Spool::open(dir.path(), 1 << 20).unwrap();
        for i in 0..5u8 {
            spool.append(&[i; 10]).unwrap();
        }
        assert_eq!(spool.stats().records, 5);
        let (first, next) = spool.peek().unwrap().unwrap();
        assert_eq!(first, vec![0; 10]);
        spool.sent_through(next, HEADER + 10).unwrap();
        drop(spool);
        // A crash before the next checkpoint: what was not marked sent comes again.
        let spool = Spool::open(dir.path(), 1 << 20).unwrap();
        assert_eq!(spool.stats().records, 4);
        let got = drain(&spool);
        assert_eq!(got, (1..5u8).map(|i| vec![i; 10]).collect::<Vec<_>>());
        assert_eq!(
            spool.stats(),
            SpoolStats {
                bytes: 0,
                records: 0,
                max_bytes: 1 << 20
            }
        );
        spool.append(b"after").unwrap();
        assert_eq!(drain(&spool), vec![b"after".to_vec()]);
    }

    #[test]
    fn a_torn_tail_is_cut_off_and_a_full_spool_refuses() {
        let dir = tempfile::tempdir().unwrap();
        let spool = Spool::open(dir.path(), 100).unwrap();
        spool.append(&[7; 40]).unwrap();
        let refused = spool.append(&[8; 60]).unwrap_err();
        assert_eq!(refused.kind(), crate::ErrorKind::Busy, "{refused}");
        drop(spool);
        // Half a record, as a crash in the middle of an append leaves it.
        let path = segment_path(dir.path(), 0);
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(&[20, 0, 0, 0, 1, 2]).unwrap();
        drop(f);
        let spool = Spool::open(dir.path(), 100).unwrap();
        assert_eq!(spool.stats().records, 1);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), HEADER + 40);
        assert_eq!(drain(&spool), vec![vec![7; 40]]);
    }

    #[test]
    fn segments_roll_and_go_once_sent() {
        let dir = tempfile::tempdir().unwrap();
        let spool = Spool::open(dir.path(), 1 << 30).unwrap();
        let big = vec![1u8; (SEGMENT_BYTES / 2) as usize];
        for _ in 0..3 {
            spool.append(&big).unwrap();
        }
        let segments = || {
            std::fs::read_dir(dir.path())
                .unwrap()
                .filter(|e| {
                    e.as_ref()
                        .unwrap()
                        .path()
                        .extension()
                        .is_some_and(|x| x == "spool")
                })
                .count()
        };
        assert_eq!(segments(), 3);
        assert_eq!(drain(&spool).len(), 3);
        assert_eq!(
            segments(),
            1,
            "sent segments go, the last stays for appends"
        );
    }
}
