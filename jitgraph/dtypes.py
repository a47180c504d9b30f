"""How types print: `f64[5,3]` for a float64 array of shape (5, 3) (the IR's notation)."""
import numpy as np

DTYPE_ABBREV = {
    "float64": "f64", "float32": "f32", "float16": "f16", "int64": "i64", "int32": "i32",
    "int16": "i16", "int8": "i8", "uint64": "u64", "uint32": "u32", "uint16": "u16", "uint8": "u8",
    "bool": "bool",
}


def type_str(shape, dtype, dims=str):
    """`f64[n0,3]`: the abbreviated dtype and the sizes, each written by `dims`."""
    if np.dtype(dtype) == object:
        return "tuple"
    dims = ",".join(dims(d) for d in shape)
    return f"{DTYPE_ABBREV.get(np.dtype(dtype).name, np.dtype(dtype).name)}[{dims}]"
