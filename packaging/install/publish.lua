-- Lmod module file for publish; packaging/install-module fills in @ROOT@ and @VERSION@.
whatis("Name: publish")
whatis("Version: @VERSION@")
whatis("Description: find, publish and prune training checkpoints on POSIX filesystems and S3")
help([[
publish @VERSION@: find the checkpoint to resume from, publish saves as training writes them, prune old ones.
Run `publish help` for the verbs. Installed in @ROOT@.
]])
family("publish")
prepend_path("PATH", "@ROOT@/bin")
