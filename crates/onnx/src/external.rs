//! Tensors whose bytes lie outside the model (`TensorProto.data_location` EXTERNAL): models over
//! 2 GB, which protobuf cannot hold in one message, are saved that way by PyTorch and `onnx`.
//!
//! The importer does no IO: it reads each such tensor's `external_data` entries (`location`,
//! `offset`, `length`) into an [`ExternalRef`] and asks the caller's [`ExternalData`] for the
//! bytes ([`crate::Options::external`]); the `irc` driver's resolver reads files relative to the
//! model's directory. The bytes are decoded as `raw_data` would be (little-endian, the tensor's
//! element type), so a length that does not match the dims is an error naming the file.

use crate::proto::TensorProto;
use std::fmt;
use std::sync::Arc;

/// Where one tensor's bytes lie: a file named relative to the model's directory, the byte
/// offset in it, and the length (`None`: to the end of the file).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExternalRef {
    pub location: String,
    pub offset: u64,
    pub length: Option<u64>,
}

impl fmt::Display for ExternalRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "'{}' (offset {}", self.location, self.offset)?;
        match self.length {
            Some(l) => write!(f, ", length {l})"),
            None => write!(f, ", to the end of the file)"),
        }
    }
}

type ReadFn = dyn Fn(&ExternalRef) -> Result<Vec<u8>, String> + Send + Sync;

/// The caller's source of external tensor bytes: given an [`ExternalRef`], the bytes it names,
/// or a message saying why not (a missing file, a range past its end, a path outside the
/// model's directory). The message is put after the tensor's name and the reference.
#[derive(Clone)]
pub struct ExternalData(Arc<ReadFn>);

impl ExternalData {
    pub fn new(
        read: impl Fn(&ExternalRef) -> Result<Vec<u8>, String> + Send + Sync + 'static,
    ) -> ExternalData {
        ExternalData(Arc::new(read))
    }

    /// The bytes `r` names.
    pub fn read(&self, r: &ExternalRef) -> Result<Vec<u8>, String> {
        (self.0)(r)
    }
}

impl fmt::Debug for ExternalData {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ExternalData(..)")
    }
}

/// The external reference of a tensor, or `None` when its data is inline.
pub fn external_ref(t: &TensorProto) -> Result<Option<ExternalRef>, String> {
    if t.data_location != 1 && t.external_data.is_empty() {
        return Ok(None);
    }
    if t.data_location != 1 {
        return Err(format!(
            "it has external_data entries but data_location {} (not EXTERNAL)",
            t.data_location
        ));
    }
    let get = |key: &str| {
        t.external_data
            .iter()
            .find(|e| e.key == key)
            .map(|e| e.value.as_str())
    };
    let location = get("location")
        .filter(|l| !l.is_empty())
        .ok_or("its data is external but external_data names no location")?
        .to_string();
    let number = |key: &str| -> Result<Option<u64>, String> {
        get(key)
            .map(|v| {
                v.trim().parse::<u64>().map_err(|_| {
                    format!("external data '{location}': {key} '{v}' is not a non-negative integer")
                })
            })
            .transpose()
    };
    let offset = number("offset")?.unwrap_or(0);
    let length = number("length")?;
    if !(t.raw_data.is_empty()
        && t.float_data.is_empty()
        && t.int32_data.is_empty()
        && t.int64_data.is_empty()
        && t.double_data.is_empty()
        && t.uint64_data.is_empty())
    {
        return Err(format!(
            "external data '{location}': the tensor also holds data inline"
        ));
    }
    Ok(Some(ExternalRef {
        location,
        offset,
        length,
    }))
}
