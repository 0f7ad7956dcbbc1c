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

use arrow_array::ffi_stream::{ArrowArrayStreamReader, FFI_ArrowArrayStream};
use arrow_array::types::{ArrowPrimitiveType, Int64Type};
use arrow_array::{Array, ArrayRef, PrimitiveArray, RecordBatch, RecordBatchIterator};
use arrow_buffer::{NullBuffer, ScalarBuffer};
use arrow_schema::{ArrowError, Field, Schema};
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
        let reader = ArrowArrayStreamReader::try_new(stream).map_err(arrow_error)?;
        let batches = reader.collect::<Result<Vec<_>, _>>().map_err(arrow_error)?;
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
        let chunks = self.chunks::<Int64Type>(name)?;
        let mut out = Vec::with_capacity(self.rows);
        for c in chunks {
            match c.nulls() {
                None => out.extend_from_slice(c.values()),
                Some(n) => out.extend(c.values().iter().zip(n.iter()).map(|(&v, ok)| if ok { v } else { NULL })),
            }
        }
        Ok(out)
    }
}

fn arrow_error(e: ArrowError) -> PyErr {
    PyValueError::new_err(format!("arrow: {e}"))
}
