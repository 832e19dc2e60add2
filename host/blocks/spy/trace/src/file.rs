//! Writing and reading trace files (traces/FORMAT.md, "File layout").

use std::fs::File;
use std::io::{BufReader, BufWriter, Cursor, Read, Seek, SeekFrom, Write};
use std::path::Path;

use serde_json::Value;

use crate::error::TraceError;
use crate::fields::{field as f, RawRecord, RECORD_SIZE};
use crate::header::{Header, HeaderInfo, Prefix, MAX_HEADER_JSON, PREFIX_LEN};
use crate::record::{Body, Footer, Record};

const REC: u64 = RECORD_SIZE as u64;

/// Writes a trace: header first, then records, then (on [`TraceWriter::finish`]) the
/// footer. A file without footer is valid and means the capture did not end cleanly.
pub struct TraceWriter<W: Write> {
    out: W,
    offset: u64,
    records: u64,
}

impl TraceWriter<BufWriter<File>> {
    /// Creates (or truncates) `path` and writes the header for `info`, created now.
    pub fn create(path: impl AsRef<Path>, info: &HeaderInfo) -> Result<Self, TraceError> {
        Self::create_with_header(path, &Header::new(info))
    }

    /// Creates (or truncates) `path` and writes `header` as given (it must carry this
    /// version's field table, e.g. from [`Header::with_time`]).
    pub fn create_with_header(path: impl AsRef<Path>, header: &Header) -> Result<Self, TraceError> {
        let file = File::create(path.as_ref()).map_err(|e| TraceError::io(0, "creating the file", e))?;
        TraceWriter::new(BufWriter::with_capacity(1 << 16, file), header)
    }
}

impl<W: Write> TraceWriter<W> {
    /// Writes the header to `out`. The header is validated exactly as a reader would, so a
    /// writer never produces a file that readers reject.
    pub fn new(mut out: W, header: &Header) -> Result<Self, TraceError> {
        let json = header.to_json();
        Header::parse(json.as_bytes()).map_err(|e| TraceError::InvalidWrite {
            offset: e.offset(),
            what: "the header",
            reason: e.to_string(),
        })?;
        let json_len =
            u32::try_from(json.len()).ok().filter(|&n| u64::from(n) <= MAX_HEADER_JSON).ok_or_else(|| TraceError::InvalidWrite {
                offset: PREFIX_LEN,
                what: "the header",
                reason: format!("header JSON is {} bytes, at most {MAX_HEADER_JSON} allowed", json.len()),
            })?;
        let prefix = Prefix { json_len, record_version: crate::header::RECORD_VERSION };
        let start = prefix.records_start();
        let pad = (start - PREFIX_LEN - u64::from(json_len)) as usize;
        let write = |out: &mut W, bytes: &[u8]| out.write_all(bytes).map_err(|e| TraceError::io(0, "writing the header", e));
        write(&mut out, &prefix.to_bytes())?;
        write(&mut out, json.as_bytes())?;
        write(&mut out, &[0u8; RECORD_SIZE][..pad])?;
        Ok(TraceWriter { out, offset: start, records: 0 })
    }

    /// Appends one TLP or timeout record. Footers are written only by [`Self::finish`].
    pub fn write(&mut self, record: &Record) -> Result<(), TraceError> {
        if record.is_footer() {
            return Err(TraceError::InvalidWrite {
                offset: self.offset,
                what: "a footer record",
                reason: "the footer is written by TraceWriter::finish, as the last record".into(),
            });
        }
        self.put(&record.to_bytes(), "writing a record")
    }

    /// Appends records as the spy delivered them (a multiple of 32 bytes, e.g. a chunk of
    /// the DMA ring). Each is checked to be of a known kind and not a footer.
    pub fn write_raw(&mut self, bytes: &[u8]) -> Result<(), TraceError> {
        if bytes.len() % RECORD_SIZE != 0 {
            return Err(TraceError::InvalidWrite {
                offset: self.offset,
                what: "raw records",
                reason: format!("{} bytes is not a multiple of {RECORD_SIZE}", bytes.len()),
            });
        }
        for (i, chunk) in bytes.chunks_exact(RECORD_SIZE).enumerate() {
            let mut rec = [0u8; RECORD_SIZE];
            rec.copy_from_slice(chunk);
            let offset = self.offset + i as u64 * REC;
            let raw = RawRecord::from_bytes(&rec);
            if raw.get(&f::FMT) == 7 {
                match Record::from_raw_at(&raw, offset) {
                    Ok(r) if r.is_footer() => {
                        return Err(TraceError::InvalidWrite {
                            offset,
                            what: "a footer record",
                            reason: "the spy never produces footers; TraceWriter::finish writes it".into(),
                        })
                    }
                    Ok(_) => {}
                    Err(e) => return Err(TraceError::InvalidWrite { offset, what: "a raw record", reason: e.to_string() }),
                }
            }
        }
        self.out.write_all(bytes).map_err(|e| TraceError::io(self.offset, "writing records", e))?;
        let n = (bytes.len() / RECORD_SIZE) as u64;
        self.offset += n * REC;
        self.records += n;
        Ok(())
    }

    fn put(&mut self, bytes: &[u8; RECORD_SIZE], what: &'static str) -> Result<(), TraceError> {
        self.out.write_all(bytes).map_err(|e| TraceError::io(self.offset, what, e))?;
        self.offset += REC;
        self.records += 1;
        Ok(())
    }

    /// Records written so far (without footer).
    pub fn records_written(&self) -> u64 {
        self.records
    }

    /// Bytes written so far.
    pub fn bytes_written(&self) -> u64 {
        self.offset
    }

    pub fn flush(&mut self) -> Result<(), TraceError> {
        self.out.flush().map_err(|e| TraceError::io(self.offset, "flushing", e))
    }

    /// Writes the footer and flushes: the capture ended cleanly. `next_sequence` is the
    /// sequence the spy would have given its next record, so that a loss at the very end
    /// of the capture also shows as a sequence gap.
    pub fn finish(mut self, next_sequence: u32, footer: Footer) -> Result<W, TraceError> {
        let record = Record { sequence: next_sequence, body: Body::Footer(footer) };
        self.put(&record.to_bytes(), "writing the footer")?;
        self.records -= 1;
        self.flush()?;
        Ok(self.out)
    }

    /// Flushes without writing a footer (the capture was interrupted).
    pub fn finish_without_footer(mut self) -> Result<W, TraceError> {
        self.flush()?;
        Ok(self.out)
    }
}

/// Reads a trace: validates the header, then yields its records in file order (the footer
/// is not among them: see [`TraceReader::footer`]). Iteration stops after the first
/// error.
pub struct TraceReader<R> {
    inner: R,
    record_version: u16,
    header: Header,
    header_json: Value,
    file_len: u64,
    records_start: u64,
    record_count: u64,
    footer: Option<Record>,
    next_index: u64,
    done: bool,
}

impl TraceReader<BufReader<File>> {
    /// Opens and validates the trace at `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, TraceError> {
        let file = File::open(path.as_ref()).map_err(|e| TraceError::io(0, "opening the file", e))?;
        TraceReader::new(BufReader::with_capacity(1 << 16, file))
    }
}

impl TraceReader<Cursor<Vec<u8>>> {
    /// Validates a trace held in memory.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Self, TraceError> {
        TraceReader::new(Cursor::new(bytes))
    }
}

fn read_exact_at<R: Read>(inner: &mut R, buf: &mut [u8], offset: u64, what: &'static str) -> Result<(), TraceError> {
    inner.read_exact(buf).map_err(|e| TraceError::io(offset, what, e))
}

impl<R: Read + Seek> TraceReader<R> {
    /// Validates the header, the record area's size and the last record (footer or not).
    pub fn new(mut inner: R) -> Result<Self, TraceError> {
        let file_len = inner.seek(SeekFrom::End(0)).map_err(|e| TraceError::io(0, "finding the file size", e))?;
        inner.seek(SeekFrom::Start(0)).map_err(|e| TraceError::io(0, "seeking", e))?;

        let mut prefix = [0u8; PREFIX_LEN as usize];
        let have = file_len.min(PREFIX_LEN) as usize;
        read_exact_at(&mut inner, &mut prefix[..have], 0, "reading the header")?;
        let magic_have = have.min(8);
        if prefix[..magic_have] != crate::header::MAGIC[..magic_have] {
            let mut found = [0u8; 8];
            found.copy_from_slice(&prefix[..8]);
            return Err(TraceError::BadMagic { found });
        }
        if file_len < PREFIX_LEN {
            return Err(TraceError::TruncatedHeader {
                offset: file_len,
                file_len,
                expected: "the 20-byte header prefix (magic, versions, record size, header JSON length)".into(),
            });
        }
        let prefix = Prefix::parse(&prefix)?;

        let json_len = u64::from(prefix.json_len);
        if json_len > MAX_HEADER_JSON {
            return Err(TraceError::HeaderTooLong { length: json_len, limit: MAX_HEADER_JSON });
        }
        if PREFIX_LEN + json_len > file_len {
            return Err(TraceError::TruncatedHeader {
                offset: file_len,
                file_len,
                expected: format!("{json_len} bytes of header JSON from offset {PREFIX_LEN} (the length at offset 16)"),
            });
        }
        let mut json = vec![0u8; json_len as usize];
        read_exact_at(&mut inner, &mut json, PREFIX_LEN, "reading the header JSON")?;
        let (header, header_json) = Header::parse_version(&json, prefix.record_version)?;

        let records_start = prefix.records_start();
        if records_start > file_len {
            return Err(TraceError::TruncatedHeader {
                offset: file_len,
                file_len,
                expected: format!("zero padding up to offset {records_start}"),
            });
        }
        let json_end = PREFIX_LEN + json_len;
        let mut pad = [0u8; RECORD_SIZE];
        let pad = &mut pad[..(records_start - json_end) as usize];
        read_exact_at(&mut inner, pad, json_end, "reading the header padding")?;
        if let Some(i) = pad.iter().position(|&b| b != 0) {
            return Err(TraceError::BadPadding { offset: json_end + i as u64, found: pad[i], records_start });
        }

        let area = file_len - records_start;
        if area % REC != 0 {
            let whole = area / REC * REC;
            return Err(TraceError::TruncatedRecords { offset: records_start + whole, partial: area % REC, file_len, records_start });
        }
        let mut record_count = area / REC;
        let mut footer = None;
        if record_count > 0 {
            let last_offset = file_len - REC;
            inner.seek(SeekFrom::Start(last_offset)).map_err(|e| TraceError::io(last_offset, "seeking to the last record", e))?;
            let mut last = [0u8; RECORD_SIZE];
            read_exact_at(&mut inner, &mut last, last_offset, "reading the last record")?;
            let mut record = Record::from_bytes_at(&last, last_offset)?;
            if let Body::Footer(ft) = &mut record.body {
                // Version 1 footers reserve those bits: no trigger information.
                if prefix.record_version < 2 {
                    ft.trigger_sequence = None;
                }
            }
            if record.is_footer() {
                footer = Some(record);
                record_count -= 1;
            }
            inner.seek(SeekFrom::Start(records_start)).map_err(|e| TraceError::io(records_start, "seeking to the records", e))?;
        }

        Ok(TraceReader {
            inner,
            record_version: prefix.record_version,
            header,
            header_json,
            file_len,
            records_start,
            record_count,
            footer,
            next_index: 0,
            done: false,
        })
    }

    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The file's record format version (1 or 2).
    pub fn record_version(&self) -> u16 {
        self.record_version
    }

    /// The header JSON exactly as stored (including keys this version does not know).
    pub fn header_json(&self) -> &Value {
        &self.header_json
    }

    /// Card clock of the timestamps, in Hz (validated > 0).
    pub fn clock_hz(&self) -> u64 {
        self.header.card.clock_hz
    }

    /// The footer's counters; `None` when the capture did not end cleanly.
    pub fn footer(&self) -> Option<&Footer> {
        match &self.footer {
            Some(Record { body: Body::Footer(ft), .. }) => Some(ft),
            _ => None,
        }
    }

    /// The footer as a record (its sequence is the spy's next sequence).
    pub fn footer_record(&self) -> Option<&Record> {
        self.footer.as_ref()
    }

    /// Records in the file, without the footer.
    pub fn record_count(&self) -> u64 {
        self.record_count
    }

    /// Offset of the first record.
    pub fn records_start(&self) -> u64 {
        self.records_start
    }

    pub fn file_len(&self) -> u64 {
        self.file_len
    }

    /// File offset of record `index`.
    pub fn offset_of(&self, index: u64) -> u64 {
        self.records_start + index * REC
    }

    /// Reads the next record as raw words (no kind validation); `None` at the end.
    pub fn next_raw(&mut self) -> Option<Result<(u64, RawRecord), TraceError>> {
        if self.done || self.next_index >= self.record_count {
            return None;
        }
        let offset = self.offset_of(self.next_index);
        let mut bytes = [0u8; RECORD_SIZE];
        if let Err(e) = read_exact_at(&mut self.inner, &mut bytes, offset, "reading a record") {
            self.done = true;
            return Some(Err(e));
        }
        self.next_index += 1;
        Some(Ok((offset, RawRecord::from_bytes(&bytes))))
    }

    /// Reads every remaining record.
    pub fn read_all(self) -> Result<Vec<Record>, TraceError> {
        self.collect()
    }
}

impl<R: Read + Seek> Iterator for TraceReader<R> {
    type Item = Result<Record, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        let (offset, raw) = match self.next_raw()? {
            Ok(x) => x,
            Err(e) => return Some(Err(e)),
        };
        let version = self.record_version;
        let result = Record::from_raw_at(&raw, offset).and_then(|r| {
            if r.is_footer() {
                Err(TraceError::MisplacedFooter { offset })
            } else if version < 2 && r.is_version_2_kind() {
                Err(TraceError::KindNotInVersion { offset, kind: r.kind_name() })
            } else {
                Ok(r)
            }
        });
        if result.is_err() {
            self.done = true;
        }
        Some(result)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        if self.done {
            return (0, Some(0));
        }
        let left = usize::try_from(self.record_count - self.next_index).unwrap_or(usize::MAX);
        (0, Some(left))
    }
}
