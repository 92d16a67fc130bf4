module github.com/ulikunitz/xz

go 1.20
