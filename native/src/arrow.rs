//! The record boundary between Python and the compiled core: Arrow record batches, moved
//! through the Arrow C stream interface (the `__arrow_c_stream__` PyCapsule protocol), so a
//! missing value crosses as a null (validity bit), never as a sentinel.
//!
//! - Out: a pass returns `Columns`, which Python reads with `pl.DataFrame(columns)` (no copy
//!   of the buffers). Build it from named arrays: `ints`, `ints_or_null`, `values_of`, `options_of`.
//! - In: a pass takes a `Table` (any object with `__arrow_c_stream__`: a polars DataFrame or
//!   Series) and reads its columns by name: `values`, `i64s`, `i64s_or_null`.
//!
//! Inside Rust a pass may keep `NULL` (i64::MIN) in its working vectors; `ints_or_null` and
//! `i64s_or_null` are the only places where it meets Arrow's nulls.
use std::borrow::Cow;
use std::ffi::CString;
use std::sync::Arc;

use arrow_array::ffi::{from_ffi_and_data_type, FFI_ArrowArray, FFI_ArrowSchema};
use arrow_array::ffi_stream::FFI_ArrowArrayStream;
use arrow_array::types::{ArrowPrimitiveType, Int64Type};
use arrow_array::{Array, ArrayRef, BinaryArray, BinaryViewArray, LargeBinaryArray, LargeStringArray, PrimitiveArray,
                  RecordBatch, RecordBatchIterator, StringArray, StringViewArray, StructArray};
use arrow_buffer::{ArrowNativeType, BooleanBufferBuilder, Buffer, NullBuffer, ScalarBuffer};
use arrow_schema::{ArrowError, DataType, Field, Schema};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyCapsule;

/// The missing-value marker inside the compiled passes' int64 working vectors.
pub const NULL: i64 = i64::MIN;

const STREAM_CAPSULE: &str = "arrow_array_stream";

/// A record batch handed to Python. Python reads it once: `pl.DataFrame(columns)`.
#[pyclass(module = "scsitrace._native")]
pub struct Columns {
    batch: Option<RecordBatch>,
}

impl Columns {
    /// A batch of the named columns (equal lengths; a column is nullable when it has nulls).
    pub fn new(columns: Vec<(&str, ArrayRef)>) -> PyResult<Columns> {
        let fields: Vec<Field> = columns.iter()
            .map(|(name, a)| Field::new(*name, a.data_type().clone(), a.null_count() > 0))
            .collect();
        let arrays = columns.into_iter().map(|(_, a)| a).collect();
        let batch = RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays).map_err(arrow_error)?;
        Ok(Columns { batch: Some(batch) })
    }
}

#[pymethods]
impl Columns {
    /// The Arrow PyCapsule protocol: the batch as a one-batch stream (moved out: read once).
    #[pyo3(signature = (requested_schema=None))]
    fn __arrow_c_stream__<'py>(&mut self, py: Python<'py>, requested_schema: Option<PyObject>)
                               -> PyResult<Bound<'py, PyCapsule>> {
        let _ = requested_schema; // the batch has one schema; the consumer casts if it wants
        let batch = self.batch.take().ok_or_else(|| PyValueError::new_err("columns already read"))?;
        let schema = batch.schema();
        let reader = RecordBatchIterator::new(std::iter::once(Ok(batch)), schema);
        let stream = FFI_ArrowArrayStream::new(Box::new(reader));
        PyCapsule::new_bound(py, stream, Some(CString::new(STREAM_CAPSULE).unwrap()))
    }

    fn __len__(&self) -> usize {
        self.batch.as_ref().map_or(0, |b| b.num_rows())
    }
}

/// An int64 column without nulls (the vector becomes the Arrow buffer: no copy).
pub fn ints(values: Vec<i64>) -> ArrayRef {
    values_of::<Int64Type>(values)
}

/// A column of any primitive type without nulls: `values::<UInt8Type>(v)`.
pub fn values_of<T: ArrowPrimitiveType>(values: Vec<T::Native>) -> ArrayRef {
    Arc::new(PrimitiveArray::<T>::new(ScalarBuffer::from(values), None))
}

/// An int64 column, null where the working vector holds `NULL`.
pub fn ints_or_null(values: Vec<i64>) -> ArrayRef {
    let valid: Vec<bool> = values.iter().map(|&v| v != NULL).collect();
    let nulls = NullBuffer::from(valid);
    let nulls = (nulls.null_count() > 0).then_some(nulls);
    Arc::new(PrimitiveArray::<Int64Type>::new(ScalarBuffer::from(values), nulls))
}

/// A column of any primitive type from options (None: null).
pub fn options_of<T: ArrowPrimitiveType>(values: impl IntoIterator<Item = Option<T::Native>>) -> ArrayRef {
    Arc::new(values.into_iter().collect::<PrimitiveArray<T>>())
}

/// A column of any primitive type, null where `valid` is false.
pub fn values_or_null<T: ArrowPrimitiveType>(values: Vec<T::Native>, valid: Vec<bool>) -> ArrayRef {
    let nulls = NullBuffer::from(valid);
    let nulls = (nulls.null_count() > 0).then_some(nulls);
    Arc::new(PrimitiveArray::<T>::new(ScalarBuffer::from(values), nulls))
}

/// The longest value a view holds inline (Arrow's `BinaryView` layout).
pub const INLINE: usize = 12;
/// A reservation of this many values or more is zeroed memory (see `Views`).
const ZEROED_FROM: usize = 1 << 20;
/// The bytes one buffer of a view array may hold (a view's offset is 31 bits).
pub const VIEW_BUFFER_BYTES: usize = 1 << 31;

/// A binary or string column being built as Arrow views (16 bytes a value: its length, then
/// the value itself if it fits in 12 bytes, else its first 4 bytes, buffer and offset), so
/// that it crosses to polars, which holds its binary and string columns so, without a copy.
/// Room reserved for many values at once (a whole capture read in one batch) is zeroed
/// memory (`slots`, of which the first `n` are values): a null's view is all zeros, so it is
/// never written, and a mostly-null column (the URBs' setup packets) touches few of its pages.
/// Smaller batches push every view: their memory is reused from batch to batch, where fresh
/// zeroed pages would each cost a fault.
pub struct Views {
    slots: Vec<u128>,
    n: usize,
    valid: BooleanBufferBuilder,
}

impl Default for Views {
    fn default() -> Self {
        Views { slots: Vec::new(), n: 0, valid: BooleanBufferBuilder::new(0) }
    }
}

impl Views {
    /// Room for `values` more values (zeroed from ZEROED_FROM values on).
    pub fn reserve(&mut self, values: usize) {
        if values >= ZEROED_FROM && self.n + values > self.slots.len() {
            let mut slots = vec![0u128; self.n + values];
            slots[..self.n].copy_from_slice(&self.slots[..self.n]);
            self.slots = slots;
        } else if self.n >= self.slots.len() {
            self.slots.reserve(values);
        }
        self.valid.reserve(values);
    }

    #[inline(always)]
    fn push_view(&mut self, view: Option<u128>) {
        if self.n < self.slots.len() {
            if let Some(v) = view {
                self.slots[self.n] = v;
            }
        } else {
            self.slots.push(view.unwrap_or(0));
        }
        self.n += 1;
        self.valid.append(view.is_some());
    }

    /// A value of at most INLINE bytes (None: a null).
    #[inline]
    pub fn push_inline(&mut self, value: Option<&[u8]>) {
        self.push_view(value.map(|v| {
            let mut bytes = [0u8; 16];
            bytes[..4].copy_from_slice(&(v.len() as u32).to_le_bytes());
            bytes[4..4 + v.len()].copy_from_slice(v);
            u128::from_le_bytes(bytes)
        }));
    }

    /// A value of one byte (None: a null).
    #[inline]
    pub fn push_byte(&mut self, value: Option<u8>) {
        self.push_view(value.map(|b| 1 | (b as u128) << 32));
    }

    /// A value of eight bytes (None: a null).
    #[inline]
    pub fn push_eight(&mut self, value: Option<[u8; 8]>) {
        self.push_view(value.map(|v| 8 | (u64::from_le_bytes(v) as u128) << 32));
    }

    /// A value longer than INLINE bytes, kept at `offset` of buffer `buffer`.
    #[inline]
    pub fn push_long(&mut self, value: &[u8], buffer: usize, offset: usize) {
        let mut bytes = [0u8; 16];
        bytes[..4].copy_from_slice(&(value.len() as u32).to_le_bytes());
        bytes[4..8].copy_from_slice(&value[..4]);
        bytes[8..12].copy_from_slice(&(buffer as u32).to_le_bytes());
        bytes[12..].copy_from_slice(&(offset as u32).to_le_bytes());
        self.push_view(Some(u128::from_le_bytes(bytes)));
    }

    /// The views of `other` after these, its buffer numbers shifted by `buffer_shift`.
    pub fn append(&mut self, mut other: Views, buffer_shift: usize) {
        let shifted = (buffer_shift as u128) << 64;
        let moved = other.slots[..other.n].iter().map(|&v| if (v as u32 as usize) > INLINE { v + shifted } else { v });
        if self.n + other.n <= self.slots.len() {
            for (slot, v) in self.slots[self.n..].iter_mut().zip(moved) {
                *slot = v;
            }
        } else {
            self.slots.truncate(self.n);
            self.slots.extend(moved);
        }
        self.n += other.n;
        self.valid.append_buffer(&other.valid.finish());
    }

    fn parts(mut self, buffers: Vec<Vec<u8>>) -> (ScalarBuffer<u128>, Vec<Buffer>, Option<NullBuffer>) {
        let nulls = NullBuffer::new(self.valid.finish());
        self.slots.truncate(self.n);
        (ScalarBuffer::from(self.slots), buffers.into_iter().map(Buffer::from_vec).collect(),
         (nulls.null_count() > 0).then_some(nulls))
    }

    /// A binary column of these views over `buffers`.
    pub fn binaries(self, buffers: Vec<Vec<u8>>) -> PyResult<ArrayRef> {
        let (views, buffers, nulls) = self.parts(buffers);
        if cfg!(debug_assertions) {
            return Ok(Arc::new(BinaryViewArray::try_new(views, buffers, nulls).map_err(arrow_error)?));
        }
        // SAFETY: push_inline and push_long make views within their buffers (debug builds check)
        Ok(Arc::new(unsafe { BinaryViewArray::new_unchecked(views, buffers, nulls) }))
    }

    /// A string column of these views over `buffers` (their values pushed as UTF-8).
    pub fn strings(self, buffers: Vec<Vec<u8>>) -> PyResult<ArrayRef> {
        let (views, buffers, nulls) = self.parts(buffers);
        if cfg!(debug_assertions) {
            return Ok(Arc::new(StringViewArray::try_new(views, buffers, nulls).map_err(arrow_error)?));
        }
        // SAFETY: as `binaries`; the callers push UTF-8 (ASCII letters)
        Ok(Arc::new(unsafe { StringViewArray::new_unchecked(views, buffers, nulls) }))
    }
}

/// A binary or string column of a `Table`, read row by row (any of Arrow's binary and string
/// layouts, in any number of chunks).
pub struct ByteColumn<'a> {
    chunks: Vec<ByteChunk<'a>>,
    starts: Vec<usize>, // the first row of each chunk
}

enum ByteChunk<'a> {
    View(&'a BinaryViewArray),
    Small(&'a BinaryArray),
    Large(&'a LargeBinaryArray),
    StrView(&'a StringViewArray),
    Str(&'a StringArray),
    LargeStr(&'a LargeStringArray),
}

impl<'a> ByteChunk<'a> {
    fn of(a: &'a ArrayRef, name: &str) -> PyResult<Self> {
        let any = a.as_any();
        let chunk = match a.data_type() {
            DataType::BinaryView => any.downcast_ref().map(ByteChunk::View),
            DataType::Binary => any.downcast_ref().map(ByteChunk::Small),
            DataType::LargeBinary => any.downcast_ref().map(ByteChunk::Large),
            DataType::Utf8View => any.downcast_ref().map(ByteChunk::StrView),
            DataType::Utf8 => any.downcast_ref().map(ByteChunk::Str),
            DataType::LargeUtf8 => any.downcast_ref().map(ByteChunk::LargeStr),
            _ => None,
        };
        chunk.ok_or_else(|| PyTypeError::new_err(format!("column {name:?} is {}, expected binary or string",
                                                         a.data_type())))
    }

    #[inline(always)]
    fn get(&self, i: usize) -> Option<&'a [u8]> {
        macro_rules! value {
            ($a:expr) => { if $a.is_null(i) { None } else { Some($a.value(i).as_ref()) } };
        }
        match self {
            ByteChunk::View(a) => value!(a),
            ByteChunk::Small(a) => value!(a),
            ByteChunk::Large(a) => value!(a),
            ByteChunk::StrView(a) => value!(a),
            ByteChunk::Str(a) => value!(a),
            ByteChunk::LargeStr(a) => value!(a),
        }
    }
}

impl<'a> ByteColumn<'a> {
    /// Row `i`'s first byte (0 for a null or an empty value); a view holds its first bytes,
    /// so for view layouts the value itself is not looked up.
    #[inline]
    pub fn first_byte(&self, i: usize) -> u8 {
        let (chunk, i) = self.locate(i);
        let of_view = |v: u128, null: bool| if v as u32 == 0 || null { 0 } else { (v >> 32) as u8 };
        match chunk {
            ByteChunk::View(a) => of_view(a.views()[i], a.is_null(i)),
            ByteChunk::StrView(a) => of_view(a.views()[i], a.is_null(i)),
            other => other.get(i).and_then(|v| v.first().copied()).unwrap_or(0),
        }
    }

    /// Row `i`'s bytes (None: null).
    #[inline]
    pub fn get(&self, i: usize) -> Option<&'a [u8]> {
        let (chunk, i) = self.locate(i);
        chunk.get(i)
    }

    /// The chunk holding row `i`, and the row's index in it.
    #[inline(always)]
    fn locate(&self, i: usize) -> (&ByteChunk<'a>, usize) {
        if self.chunks.len() == 1 {
            return (&self.chunks[0], i);
        }
        let k = self.starts.partition_point(|&s| s <= i) - 1;
        (&self.chunks[k], i - self.starts[k])
    }
}

/// Record batches read from Python (a polars DataFrame), columns by name.
pub struct Table {
    batches: Vec<RecordBatch>,
    rows: usize,
}

impl<'py> FromPyObject<'py> for Table {
    fn extract_bound(obj: &Bound<'py, PyAny>) -> PyResult<Self> {
        if !obj.hasattr("__arrow_c_stream__")? {
            return Err(PyTypeError::new_err("expected a table with __arrow_c_stream__ (a polars DataFrame)"));
        }
        let capsule = obj.call_method0("__arrow_c_stream__")?;
        let capsule = capsule.downcast::<PyCapsule>()?;
        let name = capsule.name()?.map(|n| n.to_string_lossy().into_owned());
        if name.as_deref() != Some(STREAM_CAPSULE) {
            return Err(PyTypeError::new_err("__arrow_c_stream__ returned another capsule"));
        }
        // The producer's stream is moved out of the capsule: the capsule's destructor then
        // finds it released and frees nothing twice.
        let stream = unsafe { FFI_ArrowArrayStream::from_raw(capsule.pointer() as *mut FFI_ArrowArrayStream) };
        let batches = read_stream(stream).map_err(arrow_error)?;
        let rows = batches.iter().map(|b| b.num_rows()).sum();
        Ok(Table { batches, rows })
    }
}

impl Table {
    pub fn len(&self) -> usize {
        self.rows
    }

    fn chunks<T: ArrowPrimitiveType>(&self, name: &str) -> PyResult<Vec<&PrimitiveArray<T>>> {
        self.batches.iter().map(|b| {
            let column = b.column_by_name(name)
                .ok_or_else(|| PyValueError::new_err(format!("table has no column {name:?}")))?;
            column.as_any().downcast_ref::<PrimitiveArray<T>>().ok_or_else(|| {
                PyTypeError::new_err(format!("column {name:?} is {}, expected {}", column.data_type(), T::DATA_TYPE))
            })
        }).collect()
    }

    /// A column of type `T` without nulls (borrowed when the table is one batch).
    pub fn values<T: ArrowPrimitiveType>(&self, name: &str) -> PyResult<Cow<'_, [T::Native]>> {
        let chunks = self.chunks::<T>(name)?;
        if chunks.iter().any(|c| c.null_count() > 0) {
            return Err(PyValueError::new_err(format!("column {name:?} has nulls")));
        }
        Ok(match chunks.as_slice() {
            [one] => Cow::Borrowed(one.values().as_ref()),
            _ => Cow::Owned(chunks.iter().flat_map(|c| c.values().iter().copied()).collect()),
        })
    }

    /// A column of type `T`, a null read as 0 (borrowed when the table is one batch without nulls).
    pub fn values_or_zero<T: ArrowPrimitiveType>(&self, name: &str) -> PyResult<Cow<'_, [T::Native]>> {
        let chunks = self.chunks::<T>(name)?;
        if chunks.iter().all(|c| c.null_count() == 0) {
            return self.values::<T>(name);
        }
        Ok(Cow::Owned(chunks.iter().flat_map(|c| {
            (0..c.len()).map(move |i| if c.is_null(i) { T::Native::default() } else { c.value(i) })
        }).collect()))
    }

    /// Which rows of a column hold a value: None when every row does.
    pub fn valid(&self, name: &str) -> PyResult<Option<Vec<bool>>> {
        let arrays = self.arrays(name)?;
        if arrays.iter().all(|a| a.null_count() == 0) {
            return Ok(None);
        }
        Ok(Some(arrays.iter().flat_map(|a| (0..a.len()).map(move |i| a.is_valid(i))).collect()))
    }

    /// An int64 column without nulls.
    pub fn i64s(&self, name: &str) -> PyResult<Cow<'_, [i64]>> {
        self.values::<Int64Type>(name)
    }

    /// The chunks of a column of any type (a list or string column, read by its own reader).
    pub fn arrays(&self, name: &str) -> PyResult<Vec<&ArrayRef>> {
        self.batches.iter().map(|b| b.column_by_name(name)
            .ok_or_else(|| PyValueError::new_err(format!("table has no column {name:?}")))).collect()
    }

    /// An int64 column with its nulls as `NULL` (the passes' working convention).
    pub fn i64s_or_null(&self, name: &str) -> PyResult<Vec<i64>> {
        self.widened_or_null::<Int64Type>(name)
    }

    /// An integer column of type `T` widened to int64, its nulls as `NULL`.
    pub fn widened_or_null<T: ArrowPrimitiveType>(&self, name: &str) -> PyResult<Vec<i64>> {
        let chunks = self.chunks::<T>(name)?;
        let mut out = Vec::with_capacity(self.rows);
        let wide = |v: T::Native| v.to_i64().unwrap_or(NULL);
        for c in chunks {
            match c.nulls() {
                None => out.extend(c.values().iter().map(|&v| wide(v))),
                Some(n) => out.extend(c.values().iter().zip(n.iter()).map(|(&v, ok)| if ok { wide(v) } else { NULL })),
            }
        }
        Ok(out)
    }

    /// A binary or string column, read row by row.
    pub fn bytes(&self, name: &str) -> PyResult<ByteColumn<'_>> {
        let arrays = self.arrays(name)?;
        let mut starts = Vec::with_capacity(arrays.len());
        let mut row = 0;
        for a in &arrays {
            starts.push(row);
            row += a.len();
        }
        let chunks = arrays.into_iter().map(|a| ByteChunk::of(a, name)).collect::<PyResult<Vec<_>>>()?;
        Ok(ByteColumn { chunks, starts })
    }
}

/// The record batches of an Arrow C stream. A buffer the producer allocated with less
/// alignment than its type asks (polars' 16-byte views may sit on 8 bytes) is copied to an
/// aligned one: Rust's arrays require it.
fn read_stream(mut stream: FFI_ArrowArrayStream) -> Result<Vec<RecordBatch>, ArrowError> {
    let failed = |stream: &mut FFI_ArrowArrayStream, what: &str| {
        let why = stream.get_last_error.map(|last| unsafe { last(stream) }).filter(|p| !p.is_null())
            .map(|p| unsafe { std::ffi::CStr::from_ptr(p) }.to_string_lossy().into_owned());
        ArrowError::CDataInterface(format!("{what}: {}", why.unwrap_or_default()))
    };
    let (get_schema, get_next) = match (stream.get_schema, stream.get_next) {
        (Some(s), Some(n)) if stream.release.is_some() => (s, n),
        _ => return Err(ArrowError::CDataInterface("the stream is already released".into())),
    };
    let mut ffi_schema = FFI_ArrowSchema::empty();
    if unsafe { get_schema(&mut stream, &mut ffi_schema) } != 0 {
        return Err(failed(&mut stream, "no schema"));
    }
    let schema = Schema::try_from(&ffi_schema)?;
    let mut batches = Vec::new();
    loop {
        let mut array = FFI_ArrowArray::empty();
        if unsafe { get_next(&mut stream, &mut array) } != 0 {
            return Err(failed(&mut stream, "no next batch"));
        }
        if array.is_released() {
            return Ok(batches);
        }
        let mut data = unsafe { from_ffi_and_data_type(array, DataType::Struct(schema.fields().clone())) }?;
        data.align_buffers();
        batches.push(RecordBatch::from(StructArray::from(data)));
    }
}

fn arrow_error(e: ArrowError) -> PyErr {
    PyValueError::new_err(format!("arrow: {e}"))
}
