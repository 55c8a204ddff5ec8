// Package fileblobrace holds only a test: it races gocloud's fileblob
// driver from several OS processes and shows that its IfNotExist is not
// atomic across processes, which is why pugfs has its own driver,
// layout/localblob.
//
// It is a separate package because importing gocloud.dev/blob/fileblob
// registers the "file" URL scheme, as localblob does; linking both into one
// test binary would panic at init.
package fileblobrace
