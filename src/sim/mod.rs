pub mod authz;
