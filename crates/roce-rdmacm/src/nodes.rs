/// The version script of `librdmacm.so.1`: librdmacm's version nodes,
/// each inheriting the one before, with no symbol of their own (the
/// functions are in `libibverbs.so.1` under the same nodes).
pub const VERSION_SCRIPT: &str = "RDMACM_1.0 { local: *; };
RDMACM_1.1 { } RDMACM_1.0;
RDMACM_1.2 { } RDMACM_1.1;
RDMACM_1.3 { } RDMACM_1.2;
";
