//! The full tier's end-to-end tests, one module per subject, in one test binary:
//! each starts real clusters, processes or containers (docs/testing.md).
//!
//! One binary instead of one per file so that the tests of different subjects can
//! run side by side: `cargo test` runs test binaries one after another, and most of
//! a scenario's time is waiting (lease TTLs, fault windows). `common::serial()` lets
//! two such tests run at once; `common::kube()` (the local Kubernetes cluster's
//! tests) also takes the one cluster, one such test at a time. One subject alone: `cargo test --test full
//! redis_scenarios::`.

#[path = "../common/mod.rs"]
mod common;

mod aim;
mod check_then_write;
mod client_protocol;
mod clients;
mod confirm;
mod docker;
mod docker_postgres;
mod docker_redis;
mod docker_storage;
mod e2e;
mod faults;
mod jepsen;
mod junit;
mod k8s_agent;
mod k8s_backend;
mod k8s_cluster;
mod k8s_reaper;
mod kubernetes;
mod libraries;
mod postgres;
mod prereq;
mod redis_scenarios;
mod resources;
mod seams;
mod shard;
mod shrink;
mod verdicts;
mod zk_scenarios;
mod zoo_etcd;
mod zoo_zk;
