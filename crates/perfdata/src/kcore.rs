//! kcore_dir
