//! Host bindings: one `since_v*` module per WIT package version, and one
//! enum per kind over the versions the kind exists in (as Zed's extension
//! host does). A plugin built against an older version keeps loading
//! through its own module when a newer one is added beside it; callers
//! match on the kind's enum, never reach into a version's module for a
//! world.

pub mod since_v0_1_0;
pub mod since_v0_2_0;
pub mod since_v0_3_0;
pub mod since_v0_4_0;

use wasmtime::AsContextMut;
use wasmtime::component::InstancePre;

/// A `payload-template`, which exists at 0.1.0 only.
pub use since_v0_1_0::template::{PayloadTemplate as Template, PayloadTemplatePre as TemplatePre};

/// An `event-filter`, checked and ready to instantiate, at the newest
/// version it exports.
pub enum FilterPre<T: 'static> {
    /// Built against 0.1.0: threshold conditions.
    V0_1_0(since_v0_1_0::filter::EventFilterPre<T>),
    /// Built against 0.2.0: change and z-score conditions too.
    V0_2_0(since_v0_2_0::filter::EventFilterPre<T>),
}

/// An `event-filter` instance's exports, by version.
pub enum Filter {
    /// At 0.1.0.
    V0_1_0(since_v0_1_0::filter::EventFilter),
    /// At 0.2.0.
    V0_2_0(since_v0_2_0::filter::EventFilter),
}

impl<T: Send + 'static> FilterPre<T> {
    /// The binding of the version `pre`'s component declares it exports
    /// (the newest, if several), or why it does not fit that version: a
    /// broken 0.2.0 filter reports 0.2.0's error, not 0.1.0's.
    pub fn new(pre: InstancePre<T>) -> wasmtime::Result<FilterPre<T>> {
        let declares = |version: &str| {
            let name = format!("switchyard:plugin/filter@{version}");
            pre.component().get_export_index(None, &name).is_some()
        };
        Ok(match declares("0.2.0") {
            true => FilterPre::V0_2_0(since_v0_2_0::filter::EventFilterPre::new(pre)?),
            false => FilterPre::V0_1_0(since_v0_1_0::filter::EventFilterPre::new(pre)?),
        })
    }

    /// A new instance in `store`.
    pub async fn instantiate(
        &self,
        store: impl AsContextMut<Data = T>,
    ) -> wasmtime::Result<Filter> {
        Ok(match self {
            FilterPre::V0_1_0(pre) => Filter::V0_1_0(pre.instantiate_async(store).await?),
            FilterPre::V0_2_0(pre) => Filter::V0_2_0(pre.instantiate_async(store).await?),
        })
    }
}

/// A `model-backend`, checked and ready to instantiate, at the newest
/// version it exports.
pub enum BackendPre<T: 'static> {
    /// Built against 0.1.0: chat.
    V0_1_0(since_v0_1_0::model::ModelBackendPre<T>),
    /// Built against 0.2.0: OpenAI's other chat fields passed through.
    V0_2_0(since_v0_2_0::model::ModelBackendPre<T>),
    /// Built against 0.3.0: embeddings, completions and responses too.
    V0_3_0(since_v0_3_0::model::ModelBackendPre<T>),
    /// Built against 0.4.0: prompt-cache tokens in every answer.
    V0_4_0(since_v0_4_0::model::ModelBackendPre<T>),
}

/// A `model-backend` instance's exports, by version.
pub enum Backend {
    /// At 0.1.0.
    V0_1_0(since_v0_1_0::model::ModelBackend),
    /// At 0.2.0.
    V0_2_0(since_v0_2_0::model::ModelBackend),
    /// At 0.3.0.
    V0_3_0(since_v0_3_0::model::ModelBackend),
    /// At 0.4.0.
    V0_4_0(since_v0_4_0::model::ModelBackend),
}

impl<T: Send + 'static> BackendPre<T> {
    /// A new instance in `store`.
    pub async fn instantiate(
        &self,
        store: impl AsContextMut<Data = T>,
    ) -> wasmtime::Result<Backend> {
        Ok(match self {
            BackendPre::V0_1_0(pre) => Backend::V0_1_0(pre.instantiate_async(store).await?),
            BackendPre::V0_2_0(pre) => Backend::V0_2_0(pre.instantiate_async(store).await?),
            BackendPre::V0_3_0(pre) => Backend::V0_3_0(pre.instantiate_async(store).await?),
            BackendPre::V0_4_0(pre) => Backend::V0_4_0(pre.instantiate_async(store).await?),
        })
    }
}
