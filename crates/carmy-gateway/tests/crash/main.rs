//! The crash-injection tests, a test target of their own that builds only with the feature
//! `fault-injection` (`required-features`): [`points`] aborts a replica at every boundary of an
//! execution (`FAILPOINTS`), [`soak`] drives calls while replicas and PostgreSQL are killed and
//! restarted. Run them with
//! `scripts/test -p carmy-gateway --features fault-injection --test crash`.

mod points;
mod soak;
