//! Appends records to a recording. The capture loop calls [`Writer::flush`]
//! on every drain tick, so a recording killed at any point holds everything up
//! to the last tick.
//!
//! Event bytes are gathered into EVENTS records of about 1 MiB
//! (`EVENTS_RECORD_TARGET`); metadata records are written as they come.

use std::io::{self, Write};

use serde::Serialize;

use super::{FORMAT_VERSION, MAGIC, record};

/// Event bytes are gathered into one EVENTS record of about this size.
const EVENTS_RECORD_TARGET: usize = 1 << 20;

/// The buffer to give a [`Writer`] writing to a file
/// (`BufWriter::with_capacity`): it gathers the events itself, so a
/// buffer for the small records between them is enough, and an EVENTS
/// record larger than it goes to the file without a second copy (a busy
/// job's 50 ms of events are a few hundred KiB).
pub const FILE_BUFFER: usize = 64 << 10;

pub struct Writer<W: Write> {
    out: W,
    pending_events: Vec<u8>,
}

impl<W: Write> Writer<W> {
    /// Starts a recording: writes the preamble.
    pub fn new(mut out: W) -> io::Result<Self> {
        out.write_all(&MAGIC)?;
        out.write_all(&FORMAT_VERSION.to_le_bytes())?;
        out.write_all(&0u32.to_le_bytes())?;
        Ok(Self {
            out,
            pending_events: Vec::with_capacity(EVENTS_RECORD_TARGET),
        })
    }

    /// Writes one metadata record as JSON.
    pub fn write_json<T: Serialize>(&mut self, kind: u32, value: &T) -> io::Result<()> {
        let payload = serde_json::to_vec(value).map_err(io::Error::other)?;
        self.write_record(kind, &payload)
    }

    /// Queues one raw kernel event (as the ring buffer delivered it).
    pub fn push_event(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.pending_events.extend_from_slice(bytes);
        if self.pending_events.len() >= EVENTS_RECORD_TARGET {
            self.flush_events()?;
        }
        Ok(())
    }

    /// Writes queued events and flushes everything to the file.
    pub fn flush(&mut self) -> io::Result<()> {
        self.flush_events()?;
        self.out.flush()
    }

    /// Flushes and hands back the underlying writer.
    pub fn finish(mut self) -> io::Result<W> {
        self.flush()?;
        Ok(self.out)
    }

    fn flush_events(&mut self) -> io::Result<()> {
        if self.pending_events.is_empty() {
            return Ok(());
        }
        let events = std::mem::take(&mut self.pending_events);
        let result = self.write_record(record::EVENTS, &events);
        self.pending_events = events;
        self.pending_events.clear();
        result
    }

    /// Writes one record whose payload is already encoded (JSON serialized
    /// elsewhere, say).
    pub fn write_record(&mut self, kind: u32, payload: &[u8]) -> io::Result<()> {
        let len = u32::try_from(payload.len()).map_err(io::Error::other)?;
        let mut head = [0u8; 8];
        head[..4].copy_from_slice(&kind.to_le_bytes());
        head[4..].copy_from_slice(&len.to_le_bytes());
        self.out.write_all(&head)?;
        self.out.write_all(payload)?;
        Ok(())
    }
}
