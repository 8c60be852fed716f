//! devshard-gateway.
