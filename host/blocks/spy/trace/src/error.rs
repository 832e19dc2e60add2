//! The one error type of this crate.
//!
//! Every message names the byte offset in the file where the problem is and what was
//! expected there, so that `xxd -s OFFSET file` shows it.

/// An error reading, writing or decoding a trace.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TraceError {
    #[error("offset {offset}: I/O error while {what}: {source}")]
    Io {
        offset: u64,
        what: &'static str,
        #[source]
        source: std::io::Error,
    },

    #[error("offset {offset}: file ends after {file_len} bytes, expected {expected} (is this a complete tlpx trace?)")]
    TruncatedHeader { offset: u64, file_len: u64, expected: String },

    #[error("offset 0: wrong magic {}, expected `TLPXTRC\\0` (54 4c 50 58 54 52 43 00): not a tlpx trace", hex(found))]
    BadMagic { found: [u8; 8] },

    #[error("offset 8: file format version {found} is not supported, expected 1 (a newer tlpx wrote this trace: upgrade tlpx-trace)")]
    UnsupportedFileVersion { found: u16 },

    #[error("offset 10: record size {found} bytes, expected 32 (record format versions 1 and 2)")]
    WrongRecordSize { found: u16 },

    #[error(
        "offset 12: record format version {found} is not supported, expected 1 or 2 (a newer tlpx wrote this trace: upgrade tlpx-trace)"
    )]
    UnsupportedRecordVersion { found: u16 },

    #[error("offset 14: reserved header field is {found:#06x}, expected 0")]
    ReservedHeaderField { found: u16 },

    #[error("offset 16: header JSON length {length} bytes, expected at most {limit}")]
    HeaderTooLong { length: u64, limit: u64 },

    #[error("offset {offset}: header JSON is not valid: {message}")]
    HeaderJson { offset: u64, message: String },

    #[error("offset {offset}: header JSON key `{key}` {problem}, expected {expected}")]
    HeaderKey { offset: u64, key: String, problem: String, expected: String },

    #[error("offset {offset}: header field table does not match record format version {version}: {detail}")]
    FieldTableMismatch { offset: u64, version: u16, detail: String },

    #[error("offset {offset}: header padding byte is {found:#04x}, expected 0 up to offset {records_start}")]
    BadPadding { offset: u64, found: u8, records_start: u64 },

    #[error(
        "offset {offset}: truncated record area: the last record has {partial} of 32 bytes \
         (file is {file_len} bytes, records start at offset {records_start}); \
         the capture was probably interrupted: `truncate -s {offset}` keeps the complete records"
    )]
    TruncatedRecords { offset: u64, partial: u64, file_len: u64, records_start: u64 },

    #[error(
        "offset {offset}: record uses reserved kind fmt 7 type {tlp_type}, expected type 1 (completion timeout), 2 (footer), \
         4 (MSI) or 5 (payload)"
    )]
    ReservedKind { offset: u64, tlp_type: u8 },

    #[error(
        "offset {offset}: {kind} record in a trace of record format version 1, which has no such kind \
         (expected a TLP, completion timeout or footer record; version 2 added MSI and payload records)"
    )]
    KindNotInVersion { offset: u64, kind: &'static str },

    #[error("offset {offset}: footer record is not the last record of the file, expected a TLP or event record here")]
    MisplacedFooter { offset: u64 },

    #[error("offset {offset}: cannot write {what}: {reason}")]
    InvalidWrite { offset: u64, what: &'static str, reason: String },

    #[error(
        "offset {offset}: the trace holds {records} records, {what} takes at most {limit} ({why}); \
         the CSV and log converters stream a trace of any length"
    )]
    TooManyRecords { offset: u64, records: u64, limit: u64, what: &'static str, why: &'static str },
}

impl TraceError {
    /// The byte offset in the file the error is about.
    pub fn offset(&self) -> u64 {
        match self {
            TraceError::Io { offset, .. }
            | TraceError::TruncatedHeader { offset, .. }
            | TraceError::HeaderJson { offset, .. }
            | TraceError::HeaderKey { offset, .. }
            | TraceError::FieldTableMismatch { offset, .. }
            | TraceError::BadPadding { offset, .. }
            | TraceError::TruncatedRecords { offset, .. }
            | TraceError::ReservedKind { offset, .. }
            | TraceError::KindNotInVersion { offset, .. }
            | TraceError::MisplacedFooter { offset, .. }
            | TraceError::InvalidWrite { offset, .. }
            | TraceError::TooManyRecords { offset, .. } => *offset,
            TraceError::BadMagic { .. } => 0,
            TraceError::UnsupportedFileVersion { .. } => 8,
            TraceError::WrongRecordSize { .. } => 10,
            TraceError::UnsupportedRecordVersion { .. } => 12,
            TraceError::ReservedHeaderField { .. } => 14,
            TraceError::HeaderTooLong { .. } => 16,
        }
    }

    pub(crate) fn io(offset: u64, what: &'static str, source: std::io::Error) -> Self {
        TraceError::Io { offset, what, source }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(" ")
}
