//! Rebuilds the crate when a migration changes: `refinery::embed_migrations!` reads
//! `migrations/` at compile time.

fn main() {
    println!("cargo:rerun-if-changed=../../migrations");
}
