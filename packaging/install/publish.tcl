#%Module1.0
## Environment Modules file for publish; packaging/install-module fills in @ROOT@ and @VERSION@.
proc ModulesHelp { } {
    puts stderr "publish @VERSION@: find the checkpoint to resume from, publish saves as training writes them,"
    puts stderr "prune old ones. Run `publish help` for the verbs. Installed in @ROOT@."
}
module-whatis "publish @VERSION@: find, publish and prune training checkpoints on POSIX filesystems and S3"
conflict publish
prepend-path PATH @ROOT@/bin
