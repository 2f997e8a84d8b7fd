//! A protobuf wire-format reader over a borrowed buffer: fields as (tag, value), values
//! borrowed, nothing allocated. It accepts exactly what prost accepts for the fields it
//! is asked about, and gives up (`Unsupported`) wherever prost would fail or where
//! matching prost would take more than this reader does (groups, repeated singular
//! messages): the caller then decodes with prost instead.

/// The reader gave up: decode this message with prost (which reports what is wrong,
/// or handles the rare shape this reader does not).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Unsupported;

pub(crate) type Wire<T> = Result<T, Unsupported>;

/// One field's value, by wire type.
#[derive(Clone, Copy)]
pub(crate) enum Value<'a> {
    Varint(u64),
    Fixed64(u64),
    Bytes(&'a [u8]),
    Fixed32(u32),
}

impl<'a> Value<'a> {
    #[inline]
    pub(crate) fn varint(self) -> Wire<u64> {
        match self {
            Value::Varint(v) => Ok(v),
            _ => Err(Unsupported),
        }
    }

    /// `uint32` as prost reads it (truncating).
    #[inline]
    pub(crate) fn uint32(self) -> Wire<u32> {
        self.varint().map(|v| v as u32)
    }

    /// `int32` and enums as prost reads them (truncating).
    #[inline]
    pub(crate) fn int32(self) -> Wire<i32> {
        self.varint().map(|v| v as i32)
    }

    #[inline]
    pub(crate) fn fixed64(self) -> Wire<u64> {
        match self {
            Value::Fixed64(v) => Ok(v),
            _ => Err(Unsupported),
        }
    }

    #[inline]
    pub(crate) fn fixed32(self) -> Wire<u32> {
        match self {
            Value::Fixed32(v) => Ok(v),
            _ => Err(Unsupported),
        }
    }

    /// `bytes`, and embedded messages.
    #[inline]
    pub(crate) fn bytes(self) -> Wire<&'a [u8]> {
        match self {
            Value::Bytes(b) => Ok(b),
            _ => Err(Unsupported),
        }
    }

    /// `string`: UTF-8, as prost insists.
    #[inline]
    pub(crate) fn str(self) -> Wire<&'a str> {
        std::str::from_utf8(self.bytes()?).map_err(|_| Unsupported)
    }
}

/// The fields of one message, in wire order.
pub(crate) struct Fields<'a> {
    rest: &'a [u8],
}

impl<'a> Fields<'a> {
    pub(crate) fn new(message: &'a [u8]) -> Self {
        Self { rest: message }
    }

    /// The next (tag, value), `None` at the end of the message.
    #[inline]
    pub(crate) fn next_field(&mut self) -> Wire<Option<(u32, Value<'a>)>> {
        if self.rest.is_empty() {
            return Ok(None);
        }
        let key = self.varint()?;
        let tag = u32::try_from(key >> 3).map_err(|_| Unsupported)?;
        if tag == 0 {
            return Err(Unsupported);
        }
        let value = match key & 7 {
            0 => Value::Varint(self.varint()?),
            1 => Value::Fixed64(u64::from_le_bytes(self.take_array()?)),
            2 => {
                let len = usize::try_from(self.varint()?).map_err(|_| Unsupported)?;
                if len > self.rest.len() {
                    return Err(Unsupported);
                }
                let (bytes, rest) = self.rest.split_at(len);
                self.rest = rest;
                Value::Bytes(bytes)
            }
            5 => Value::Fixed32(u32::from_le_bytes(self.take_array()?)),
            // Groups (3, 4) are skipped by prost; nothing OTLP sends has them.
            _ => return Err(Unsupported),
        };
        Ok(Some((tag, value)))
    }

    #[inline]
    fn take_array<const N: usize>(&mut self) -> Wire<[u8; N]> {
        let (head, rest) = self.rest.split_first_chunk::<N>().ok_or(Unsupported)?;
        self.rest = rest;
        Ok(*head)
    }

    /// A base-128 varint of at most ten bytes, the tenth at most 1 (as prost).
    #[inline]
    fn varint(&mut self) -> Wire<u64> {
        let mut value = 0u64;
        for (i, &byte) in self.rest.iter().take(10).enumerate() {
            if i == 9 && byte > 1 {
                return Err(Unsupported);
            }
            value |= u64::from(byte & 0x7f) << (7 * i);
            if byte < 0x80 {
                self.rest = &self.rest[i + 1..];
                return Ok(value);
            }
        }
        Err(Unsupported)
    }
}

/// A singular message field seen once at most: prost merges a repeated one, which
/// this reader leaves to prost.
#[inline]
pub(crate) fn once<'a>(slot: &mut Option<&'a [u8]>, value: Value<'a>) -> Wire<()> {
    if slot.replace(value.bytes()?).is_some() {
        return Err(Unsupported);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(bytes: &[u8]) -> Wire<Vec<(u32, u64)>> {
        let mut f = Fields::new(bytes);
        let mut out = Vec::new();
        while let Some((tag, v)) = f.next_field()? {
            let n = match v {
                Value::Varint(n) | Value::Fixed64(n) => n,
                Value::Fixed32(n) => u64::from(n),
                Value::Bytes(b) => b.len() as u64,
            };
            out.push((tag, n));
        }
        Ok(out)
    }

    #[test]
    fn reads_each_wire_type() {
        // 1: varint 300; 2: bytes "ab"; 3: fixed64 7; 4: fixed32 9.
        let bytes = [
            0x08, 0xac, 0x02, 0x12, 2, b'a', b'b', 0x19, 7, 0, 0, 0, 0, 0, 0, 0, 0x25, 9, 0, 0, 0,
        ];
        assert_eq!(fields(&bytes), Ok(vec![(1, 300), (2, 2), (3, 7), (4, 9)]));
    }

    #[test]
    fn gives_up_where_prost_would_fail() {
        for bad in [
            &[0x08][..],      // varint cut short
            &[0x12, 5, b'a'], // bytes longer than the message
            &[0x00, 1],       // tag 0
            &[0x0b, 0x0c],    // a group
            &[0x0e, 1],       // wire type 6
            &[0x19, 1, 2, 3], // fixed64 cut short
            &[
                0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02,
            ], // 10th byte > 1
        ] {
            assert_eq!(fields(bad), Err(Unsupported), "{bad:?}");
        }
        assert_eq!(Value::Bytes(&[0xff]).str(), Err(Unsupported));
        assert_eq!(Value::Varint(1).bytes(), Err(Unsupported));
    }
}
