//! Host bindings, one module per WIT package version. A plugin built against
//! an older version keeps loading through its own module when a newer one is
//! added beside it.

pub mod v0_1_0;
pub mod v0_2_0;
pub mod v0_3_0;
