//! Blueprints.
